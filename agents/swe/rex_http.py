"""A lean client of SWE-ReX's HTTP API: one keep-alive connection per sandbox, one request at a time.

SWE-ReX's server runs one command at a time and answers nothing meanwhile, so a sandbox never needs two
requests in flight. SWE-ReX's own ``RemoteRuntime`` opens a new aiohttp session and TCP connection for
every request: measured here at 1.55 ms of the caller's CPU per ``execute`` of ``true`` (4.8 ms wall);
this client, a plain keep-alive HTTP/1.1 exchange on a blocking socket, at 0.13 ms (2.4 ms wall), and it
also runs over a tunnel that is not TCP (the Docker API's exec stream, :mod:`rex_docker`). The requests
and answers are SWE-ReX's own (its ``Command`` and ``CommandResponse``).

Every request carries SWE-ReX's idempotency key (``X-Request-ID``): a request whose connection broke is
sent once more on a fresh connection, and a server that had already run it answers from its memory
instead of running it twice. A server that does not answer (refused, reset, silent past the request's
bound) raises :class:`HostUnreachable`; a wrong token :class:`TokenRefused`.
"""

from __future__ import annotations

import json
import socket
import ssl
import uuid
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from pacore_agents.swe.sandbox import SandboxError

CONNECT_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 65536


class HostUnreachable(SandboxError):
    """The server did not answer (refused, reset, or silent past the bound): its host is taken as lost."""


class TokenRefused(SandboxError):
    """The server refused pacore's token (HTTP 401)."""


class RemoteFailure(SandboxError):
    """The server answered with an error of its own (a SWE-ReX exception, a 4xx or 5xx)."""


class Stream(Protocol):
    """What the client needs of a connection: a TCP or TLS socket, or a tunnel."""

    def sendall(self, data: bytes) -> None: ...

    def recv(self, size: int) -> bytes: ...

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


class RexConnection:
    """SWE-ReX's API over one keep-alive connection (opened on first use, and again after a break)."""

    def __init__(self, connect: Callable[[], Stream], token: str, *, where: str):
        self._connect = connect
        self._headers = f"Host: sandbox\r\nX-API-Key: {token}\r\nContent-Type: application/json\r\n"
        self.where = where  # for messages: the host's name and address, never the token
        self._stream: Stream | None = None
        self._buffer = b""

    def call(self, endpoint: str, payload: dict[str, Any] | None, *, timeout: float) -> dict[str, Any]:
        """POST ``payload`` (GET when None) to ``/endpoint``; the decoded JSON answer.

        ``timeout`` bounds the wait for the answer (a command's own limit plus a margin)."""
        method = "GET" if payload is None else "POST"
        body = b"" if payload is None else json.dumps(payload).encode()
        request = (
            f"{method} /{endpoint} HTTP/1.1\r\n{self._headers}X-Request-ID: {uuid.uuid4().hex}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        for attempt in (0, 1):
            fresh = self._stream is None
            try:
                stream = self._open()
                stream.settimeout(timeout)
                stream.sendall(request)
                status, headers, answer = self._read_response(stream)
                break
            except (OSError, ConnectionError, ValueError) as exc:
                self.close()
                if attempt == 0 and not fresh and not isinstance(exc, TimeoutError):
                    continue  # a kept-alive connection the server had closed: once more on a new one
                raise HostUnreachable(f"{self.where} did not answer ({_why(exc)})") from None
        if headers.get("connection", "").lower() == "close":
            self.close()
        return self._decode(endpoint, status, answer)

    def _open(self) -> Stream:
        if self._stream is None:
            self._stream = self._connect()
            self._buffer = b""
        return self._stream

    def _read_response(self, stream: Stream) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self._buffer:
            self._fill(stream)
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise ValueError("response headers too long")
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return status, headers, self._read_chunked(stream)
        length = int(headers.get("content-length", "0"))
        while len(self._buffer) < length:
            self._fill(stream)
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return status, headers, body

    def _read_chunked(self, stream: Stream) -> bytes:
        body = bytearray()
        while True:
            while b"\r\n" not in self._buffer:
                self._fill(stream)
            size_line, self._buffer = self._buffer.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(self._buffer) < size + 2:
                self._fill(stream)
            body += self._buffer[:size]
            self._buffer = self._buffer[size + 2 :]
            if size == 0:
                return bytes(body)

    def _fill(self, stream: Stream) -> None:
        chunk = stream.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed")
        self._buffer += chunk

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
        if self._stream is not None:
            stream, self._stream = self._stream, None
            try:
                stream.close()
            except OSError:
                pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "no answer within the bound"
    return str(exc) or type(exc).__name__
