"""A lean client of SWE-ReX's HTTP API: one keep-alive connection per sandbox, one request at a time.

SWE-ReX's server runs one command at a time and answers nothing meanwhile, so a sandbox never needs two
requests in flight. SWE-ReX's own ``RemoteRuntime`` opens a new aiohttp session and TCP connection for
every request: measured here at 1.55 ms of the caller's CPU per ``execute`` of ``true`` (4.8 ms wall).
This client is Python's ``http.client`` on one kept-alive connection, over any stream that acts as a
socket: a TCP or TLS socket, or a tunnel that is not TCP (the Docker API's exec stream, :mod:`rex_docker`).
The requests and answers are SWE-ReX's own (its ``Command`` and ``CommandResponse``).

Every request carries SWE-ReX's idempotency key (``X-Request-ID``): a request whose kept-alive connection
broke is sent once more, with the same key, on a fresh connection, and a server that had already run it
answers from its memory instead of running it twice. A server that does not answer (refused, reset, silent
past the request's bound) raises :class:`HostUnreachable`; a wrong token :class:`TokenRefused`.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import uuid
from collections.abc import Callable
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from pacore_agents.swe.sandbox import SandboxError

CONNECT_TIMEOUT_S = 10.0


class HostUnreachable(SandboxError):
    """The server did not answer (refused, reset, or silent past the bound): its host is taken as lost."""


class TokenRefused(SandboxError):
    """The server refused pacore's token (HTTP 401)."""


class RemoteFailure(SandboxError):
    """The server answered with an error of its own (a SWE-ReX exception, a 4xx or 5xx)."""


class Stream(Protocol):
    """What ``http.client`` needs of a connection: a TCP or TLS socket, or a tunnel that acts as one."""

    def sendall(self, data: bytes) -> None: ...

    def makefile(self, mode: Literal["rb"]) -> Any: ...

    def settimeout(self, timeout: float | None) -> None: ...

    def close(self) -> None: ...


def tcp_connector(url: str, *, ca: str | None = None) -> Callable[[], Stream]:
    """Opens a TCP connection to ``url``'s machine and port, wrapped in TLS for https:// (system CAs, or ``ca``)."""
    parts = urlsplit(url)
    address = (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    context = None
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=ca)

    def connect() -> Stream:
        raw = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            return context.wrap_socket(raw, server_hostname=address[0])
        return raw

    return connect


class _Connection(http.client.HTTPConnection):
    """``http.client``'s connection, its socket opened by ``connect`` (a TCP or TLS socket, or a tunnel)."""

    def __init__(self, connect: Callable[[], Stream]):
        super().__init__("sandbox")  # the Host header; the stream decides where the bytes go
        self._open = connect

    def connect(self) -> None:
        self.sock = self._open()


class RexConnection:
    """SWE-ReX's API over one keep-alive connection (opened on first use, and again after a break)."""

    def __init__(self, connect: Callable[[], Stream], token: str, *, where: str):
        self._http = _Connection(connect)
        self._headers = {"X-API-Key": token, "Content-Type": "application/json"}
        self.where = where  # for messages: the host's name and address, never the token

    def call(self, endpoint: str, payload: dict[str, Any] | None, *, timeout: float) -> dict[str, Any]:
        """POST ``payload`` (GET when None) to ``/endpoint``; the decoded JSON answer.

        ``timeout`` bounds the wait for the answer (a command's own limit plus a margin)."""
        method = "GET" if payload is None else "POST"
        body = None if payload is None else json.dumps(payload).encode()
        headers = {**self._headers, "X-Request-ID": uuid.uuid4().hex}
        connection = self._http
        for attempt in (0, 1):
            fresh = connection.sock is None
            try:
                if fresh:
                    connection.connect()
                assert connection.sock is not None
                connection.sock.settimeout(timeout)
                connection.request(method, f"/{endpoint}", body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if attempt == 0 and not fresh and not isinstance(exc, TimeoutError):
                    continue  # a kept-alive connection the server had closed: once more on a new one
                raise HostUnreachable(f"{self.where} did not answer ({_why(exc)})") from None
        return self._decode(endpoint, response.status, answer)

    def _decode(self, endpoint: str, status: int, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            data = {"detail": body[:300].decode(errors="replace")}
        if status == 401:
            raise TokenRefused(f"{self.where} refused pacore's token (401 {data.get('detail', '')})".strip())
        if status == 511 and isinstance(data.get("swerexception"), dict):
            failure = data["swerexception"]
            raise RemoteFailure(f"{self.where} /{endpoint}: {failure.get('class_path')}: {failure.get('message')}")
        if status >= 400:
            raise RemoteFailure(f"{self.where} /{endpoint}: HTTP {status} {str(data.get('detail', ''))[:300]}")
        if not isinstance(data, dict):
            raise RemoteFailure(f"{self.where} /{endpoint}: unexpected answer {str(data)[:200]}")
        return data

    def close(self) -> None:
        try:
            self._http.close()
        except OSError:
            pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the bound"
    return str(exc) or type(exc).__name__
