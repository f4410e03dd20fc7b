"""The HTTP connections the endpoint accepts: a limit on how many, and on how long one may take to send its
request head.

Why below the ASGI app: uvicorn closes a keep-alive connection idle after a reply (``timeout_keep_alive``),
but not one that never sends a request, nor one that trickles its head a byte at a time (any byte restarts
its keep-alive timer); its own ``limit_concurrency`` answers in plain text. So each connection here runs
uvicorn's own HTTP protocol (the one uvicorn would pick) with three additions:

- past the connection limit a new connection is answered 503 in OpenAI's error shape and closed;
- a request head not complete within ``header_timeout`` of the connection's opening (or of its previous
  reply) closes the connection (with a 408 when part of a head had come);
- a head larger than :data:`MAX_HEAD_BYTES` is a 431; a malformed one a 400, in OpenAI's shape.

It reads uvicorn's protocol attributes ``connections``, ``cycle`` (the request being answered) and
``transport``, and its ``on_response_complete`` hook, which its HTTP/1.1 protocols (httptools, h11) share.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

if TYPE_CHECKING:  # what _Guard is mixed into: the protocol uvicorn picks (httptools' here, h11's the same shape)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _UvicornProtocol
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
else:
    _UvicornProtocol = object

from pacore_graph.server.errors import RequestError
from pacore_graph.server.limits import ServerLimits, connection_limit

MAX_HEAD_BYTES = 64 * 1024  # request line and headers; an OpenAI client sends well under 2 KiB


class _Guard(_UvicornProtocol):
    """Mixed in before a uvicorn HTTP protocol class (see :func:`guarded_protocol`)."""

    header_timeout: float
    max_connections: int

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # narrower than asyncio's, as uvicorn's own
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._answered_cycle: Any = None  # the last request whose head was parsed
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse(RequestError(
                503, f"the server holds its limit of {self.max_connections} connections: try again shortly",
                type="server_error", code="too_many_connections",
            ))  # fmt: skip
            return
        self._wait_for_head()

    def data_received(self, data: bytes) -> None:
        waiting = self._head_timer is not None
        if waiting:
            self._head_bytes += len(data)
        super().data_received(data)
        cycle = self.request_cycle()
        if cycle is not None and cycle is not self._answered_cycle:  # a new request's head was parsed
            self._answered_cycle = cycle
            self._stop_waiting()
        elif waiting and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._refuse(RequestError(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes"))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        cycle = self.request_cycle()
        if cycle is not None and cycle is not self._answered_cycle:  # a pipelined request started
            self._answered_cycle = cycle
        elif not self.transport.is_closing():
            self._wait_for_head()

    def request_cycle(self) -> RequestResponseCycle | None:
        """The request being answered: None before the first (uvicorn types it as never None)."""
        return self.cycle

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        self._refuse(RequestError(400, f"malformed HTTP request: {msg}"))

    def _wait_for_head(self) -> None:
        self._stop_waiting()
        self._head_bytes = 0
        self._head_timer = asyncio.get_running_loop().call_later(self.header_timeout, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_bytes:
            self._refuse(RequestError(408, f"the request head did not arrive within {self.header_timeout:g} s"))
        else:
            self.transport.close()  # an idle connection: nobody to tell

    def _refuse(self, error: RequestError) -> None:
        self._stop_waiting()
        self.transport.write(error.http_bytes())
        self.transport.close()


def guarded_protocol(limits: ServerLimits, max_connections: int, base: type | None = None) -> type:
    """uvicorn's HTTP protocol class (``base``; default the one uvicorn picks) with the guards above."""
    base = base or AutoHTTPProtocol
    return type(f"Guarded{base.__name__}", (_Guard, base),
                {"header_timeout": limits.header_timeout, "max_connections": max_connections})  # fmt: skip


def uvicorn_config(app: Any, **settings: Any) -> uvicorn.Config:
    """The uvicorn configuration that serves ``app`` within the limits it was made with (``app.state.limits``
    of :func:`~pacore_graph.server.create_app`; defaults for another app). ``settings``: host, port, log level..."""
    state = getattr(app, "state", None)
    limits: ServerLimits = getattr(state, "limits", None) or ServerLimits()
    max_connections = connection_limit(limits, getattr(state, "upstream_slots", 0))
    return uvicorn.Config(
        app, http=guarded_protocol(limits, max_connections),
        # uvicorn annotates an int but only hands it to loop.call_later: a fraction of a second works
        timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type]
        **settings,
    )  # fmt: skip
