"""The HTTP connections the endpoint accepts: a limit on how many, and on how long one may take to send its
request head.

Why below the ASGI app: uvicorn closes a keep-alive connection idle after a reply (``timeout_keep_alive``),
but not one that never sends a request, nor one that trickles its head a byte at a time (any byte restarts
its keep-alive timer); its own ``limit_concurrency`` answers in plain text. So each connection is a
:class:`_Guard` in front of uvicorn's own HTTP protocol (the one uvicorn would pick), which it only feeds
through the ``asyncio.Protocol`` interface, with three additions:

- past the connection limit a new connection is answered 503 in OpenAI's error shape and closed;
- a request head not complete within ``header_timeout`` of the connection's opening (or of its previous
  reply) closes the connection (with a 408 when part of a head had come);
- a head larger than :data:`MAX_HEAD_BYTES` is a 431; a malformed one a 400, in OpenAI's shape.

The guard parses the bytes it passes on with httptools' public parser (as uvicorn does) to see where heads
end; an ASGI wrapper around the app tells it when a reply is complete. It finds the wrapper through a
context variable set while uvicorn reads the bytes: the request task uvicorn creates then inherits it
(docs/architecture.md lists this assumption; tests/project/test_upstream_assumptions.py checks it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, ClassVar, cast

import httptools
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from pacore_graph.server.errors import RequestError
from pacore_graph.server.limits import ServerLimits, connection_limit

MAX_HEAD_BYTES = 64 * 1024  # request line and headers; an OpenAI client sends well under 2 KiB

_CONNECTION: ContextVar[_Guard | None] = ContextVar("pacore_connection", default=None)


class _Guard(asyncio.Protocol):
    """One client connection, in front of uvicorn's protocol for it (see :func:`guarded_protocol`)."""

    header_timeout: ClassVar[float]
    max_connections: ClassVar[int]
    base: ClassVar[Callable[..., asyncio.Protocol]]
    live: ClassVar[set[_Guard]]  # this server's open connections

    def __init__(self, **uvicorn_arguments: Any) -> None:
        self._inner = self.base(**uvicorn_arguments)  # whatever uvicorn constructs its protocol with
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools < 0.6.3 has no leniencies, nor uvicorn's parser then
            self._parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's own parser
        self._transport: asyncio.Transport | None = None
        self._passing = False  # the inner protocol has the connection
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # received since the guard began waiting for a head
        self._heads = 0  # request heads parsed
        self._unanswered = 0  # of them, those whose reply is not complete

    # ---- asyncio.Protocol, passed on to uvicorn's protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.live.add(self)
        if len(self.live) > self.max_connections:
            self._refuse(
                RequestError(
                    503,
                    f"the server holds its limit of {self.max_connections} connections: try again shortly",
                    type="server_error",
                    code="too_many_connections",
                )
            )
            return
        self._passing = True
        self._inner.connection_made(transport)
        self._wait_for_head()

    def data_received(self, data: bytes) -> None:
        if not self._passing:
            return
        waiting = self._head_timer is not None
        if waiting:
            self._head_bytes += len(data)
        heads = self._heads
        if self._parser is not None:
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                self._parser = None  # what follows belongs to the upgraded protocol
            except httptools.HttpParserError as exc:
                self._refuse(RequestError(400, f"malformed HTTP request: {exc}"))
                return
        if waiting and self._heads == heads and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(RequestError(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes"))
            return
        token = _CONNECTION.set(self)  # inherited by the request task uvicorn creates here
        try:
            self._inner.data_received(data)
        finally:
            _CONNECTION.reset(token)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._passing else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self.live.discard(self)
        if self._passing:
            self._passing = False
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._passing:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._passing:
            self._inner.resume_writing()

    # ---- httptools' callback, and the app wrapper's

    def on_headers_complete(self) -> None:
        self._heads += 1
        self._unanswered += 1
        self._stop_waiting()

    def reply_complete(self) -> None:
        """A request's reply was sent (or its app ended without one): wait for the next head unless one came."""
        self._unanswered = max(0, self._unanswered - 1)
        if self._unanswered == 0 and self._passing and self._transport and not self._transport.is_closing():
            self._wait_for_head()

    # ---- the head timer

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
        if self._transport is None or self._transport.is_closing():
            return
        if self._head_bytes:
            self._refuse(RequestError(408, f"the request head did not arrive within {self.header_timeout:g} s"))
        else:
            self._transport.close()  # an idle connection: nobody to tell

    def _refuse(self, error: RequestError) -> None:
        self._stop_waiting()
        assert self._transport is not None
        self._transport.write(error.http_bytes())
        self._transport.close()


class _ReplyTracker:
    """The ASGI app, telling its connection's guard when each reply is complete."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guard = _CONNECTION.get() if scope["type"] == "http" else None
        if guard is None:  # not served through a guard (another server, a test client)
            await self.app(scope, receive, send)
            return
        complete = False

        async def tracked(message: Message) -> None:
            nonlocal complete
            token = _CONNECTION.set(guard)  # for the pipelined request uvicorn may start from this send
            try:
                await send(message)
            finally:
                _CONNECTION.reset(token)
            if message["type"] == "http.response.body" and not message.get("more_body") and not complete:
                complete = True
                guard.reply_complete()

        token = _CONNECTION.set(None)  # tasks the app starts (and may keep) do not keep the connection alive
        try:
            await self.app(scope, receive, tracked)
        finally:
            _CONNECTION.reset(token)
            if not complete:  # failed or returned without a reply: uvicorn answers or closes
                guard.reply_complete()


def guarded_protocol(limits: ServerLimits, max_connections: int, base: type | None = None) -> type[asyncio.Protocol]:
    """A protocol class for uvicorn's ``http`` setting: ``base`` (default the one uvicorn picks) behind the guards
    above. Each class counts its own connections: one per server."""
    return type(
        f"Guarded{(base or AutoHTTPProtocol).__name__}",
        (_Guard,),
        {
            "header_timeout": limits.header_timeout,
            "max_connections": max_connections,
            "base": base or AutoHTTPProtocol,
            "live": set(),
        },
    )


def uvicorn_config(app: Any, **settings: Any) -> uvicorn.Config:
    """The uvicorn configuration that serves ``app`` within the limits it was made with (``app.state.limits``
    of :func:`~pacore_graph.server.create_app`; defaults for another app). ``settings``: host, port, log level..."""
    state = getattr(app, "state", None)
    limits: ServerLimits = getattr(state, "limits", None) or ServerLimits()
    max_connections = connection_limit(limits, getattr(state, "upstream_slots", 0))
    return uvicorn.Config(
        _ReplyTracker(app),
        http=guarded_protocol(limits, max_connections),
        # uvicorn annotates an int but only hands it to loop.call_later: a fraction of a second works
        timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type]
        **settings,
    )
