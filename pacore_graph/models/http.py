"""A lean HTTP/1.1 client for one server: keep-alive connections on asyncio, responses parsed by httptools.

Why not aiohttp's ``ClientSession``: at 1024 requests in flight its request machinery (URL objects,
cookie jar, tracing signals, timers, response and payload objects) costs about 0.3 ms of client CPU per
request, about a third of a whole PaCoRe trajectory's cost (measured: docs/performance.md). A chat
completion needs little of it: POST a JSON body to one URL, read the whole response or its body as it
arrives (server-sent events), reuse the connections the server keeps alive. This client does that and
closes the connection whenever a request is abandoned (cancelled, timed out, failed midway), so the
server stops generating for nobody. llhttp (through httptools, as uvicorn uses it) does the parsing:
content length, chunked transfer encoding, or a body that ends with the connection.

One :class:`ConnectionPool` belongs to one event loop (a client keeps one per loop in a
:class:`~pacore_graph.concurrency.per_loop.PerLoop`, which closes it when that loop shuts down). Time limits
are the caller's (``asyncio.timeout`` around a request).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httptools

from pacore_graph.errors import ModelRequestError


class Reply(NamedTuple):
    """A whole response: status, body, and the server's Retry-After header (None when it sent none)."""

    status: int
    body: bytes
    retry_after: str | None = None


class _Exchange:
    """One request's response so far: status, body pieces, whether it is complete or failed."""

    __slots__ = ("status", "chunks", "complete", "keep_alive", "error", "waiter", "until_eof", "loop", "retry_after")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.status = 0
        self.retry_after: str | None = None  # the Retry-After header, as sent
        self.chunks: list[bytes] = []
        self.complete = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.until_eof = True  # no length and not chunked: the body ends with the connection

    def fail(self, error: BaseException) -> None:
        if not self.complete and self.error is None:
            self.error = error
            self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until the parser reports something new, or the exchange fails."""
        if self.error is not None:
            raise self.error
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None
        if self.error is not None:
            raise self.error


class _Connection(asyncio.Protocol):
    """One keep-alive connection; it carries one exchange at a time, parsed by one parser (the parser
    calls the ``on_*`` methods, and starts over after each complete response)."""

    def __init__(self, pool: ConnectionPool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.parser = httptools.HttpResponseParser(self)

    # A stream connection's transport, narrower than asyncio's BaseTransport (as uvicorn's protocols declare it);
    # not checked with isinstance: uvloop's transports are not asyncio.Transport subclasses.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:  # nothing was asked: a server talking out of turn is not reused
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            exchange.fail(ModelRequestError(f"malformed HTTP response from {self.pool.url}: {exc}", retryable=True))
            self.close()

    # The parser calls these only from feed_data in data_received, which returns early without an exchange.
    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered in (b"content-length", b"transfer-encoding"):
            exchange = self.exchange
            assert exchange is not None
            exchange.until_eof = False
        elif lowered == b"retry-after":
            exchange = self.exchange
            assert exchange is not None
            exchange.retry_after = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.status = self.parser.get_status_code()
        exchange.wake()

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.chunks.append(body)
        exchange.wake()

    def on_message_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.complete = True
        exchange.keep_alive = self.parser.should_keep_alive()
        exchange.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is None or exchange.complete:
            return
        if exchange.until_eof and exchange.status:  # a body delimited by the end of the connection
            exchange.complete = True
            exchange.wake()
            return
        exchange.fail(
            ModelRequestError(
                f"the server at {self.pool.url} closed the connection before the response was complete"
                + (f": {exc}" if exc else ""),
                retryable=True,
            )
        )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Keep-alive connections to the server of ``url``; requests POST to that URL.

    ``headers`` are sent with every request (besides Host, Content-Type and Content-Length); each call
    may add its own.
    """

    def __init__(self, url: str, headers: dict[str, str] | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        literal = _literal_address(self._host, self._port)
        self._addresses: list[tuple[Any, ...]] | None = [literal] if literal else None  # the one that worked first
        self._resolving: asyncio.Future[list[Any]] | None = None  # one lookup shared by every connection
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._opening: set[asyncio.Task[None]] = set()  # preconnect's, until they land
        self._spares: deque[_Connection] = deque()  # preconnect's, landed and not used yet (oldest first)
        self._claims: deque[asyncio.Future[_Connection | None]] = deque()  # requests waiting for one to land
        host = f"[{self._host}]" if ":" in self._host else self._host
        default_port = self._port == (443 if self._ssl else 80)
        lines = [
            f"POST {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1",
            f"Host: {host if default_port else f'{host}:{self._port}'}",
            "User-Agent: pacore-graph",
            "Content-Type: application/json",
        ]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def post(self, body: bytes, headers: dict[str, str] | None = None) -> Reply:
        """Send ``body``; the status, the whole response body and the Retry-After header if any."""
        connection, exchange = await self._send(body, headers)
        del body  # sent: not held while the server generates (orjson's buffers are 4 KB however short the body)
        try:
            while not exchange.complete:
                await exchange.wait()
        except BaseException:
            connection.close()
            self._busy.discard(connection)
            raise
        self._release(connection, exchange)
        return Reply(exchange.status, b"".join(exchange.chunks), exchange.retry_after)

    def stream(self, body: bytes, headers: dict[str, str] | None = None) -> StreamedResponse:
        """Send ``body`` and read the response as it arrives: ``async with pool.stream(...) as response``."""
        return StreamedResponse(self, body, headers)

    def preconnect(self, connections: int) -> None:
        """Open connections in the background until ``connections`` exist (idle, busy or opening).

        A burst of requests built meanwhile then finds them ready. Otherwise each request starts its own
        handshake, which completes only once the whole burst is built (asyncio polls its sockets between
        batches of callbacks). A request that finds none idle waits for one still opening, in the order
        requests came; a connection that fails to open is handed on as none, and the request opens its own
        (and reports the error).
        """
        for _ in range(connections - len(self._idle) - len(self._spares) - len(self._busy) - len(self._opening)):
            task = asyncio.ensure_future(self._open_spare())
            self._opening.add(task)

    async def _open_spare(self) -> None:
        connection: _Connection | None = None
        try:
            connection = await self._connect()
        except Exception:  # noqa: BLE001 - the request it is handed to opens its own and reports it
            pass
        finally:  # also when aclose() cancels it: a waiting request must not wait on
            self._opening.discard(asyncio.current_task())
            claims = self._claims
            while claims:
                claim = claims.popleft()
                if not claim.done():
                    claim.set_result(connection)
                    break
            else:
                if connection is not None:
                    self._spares.append(connection)

    async def _new_connection(self) -> _Connection:
        """One opening in the background if there is one nobody waits for yet, else one of our own."""
        if len(self._opening) > len(self._claims):
            claim: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self._claims.append(claim)
            try:
                connection = await claim
            except asyncio.CancelledError:
                if claim.done() and not claim.cancelled() and (handed := claim.result()) is not None:
                    self._spares.append(handed)  # it landed as this request was cancelled: not lost
                raise
            if connection is not None and not connection.closed:
                return connection
        return await self._connect()

    async def aclose(self) -> None:
        """Close every connection (requests in flight fail)."""
        for task in self._opening:  # one not started yet never runs its finally: no one waits on it
            task.cancel()
        self._opening.clear()
        while self._claims:
            claim = self._claims.popleft()
            if not claim.done():
                claim.set_result(None)
        for connection in (*self._idle, *self._spares, *self._busy):
            connection.close()
        self._idle.clear()
        self._spares.clear()
        self._busy.clear()

    # ---- connections -------------------------------------------------------------------------------

    async def _send(self, body: bytes, headers: dict[str, str] | None) -> tuple[_Connection, _Exchange]:
        head = self._head + _header_lines(headers) if headers else self._head
        connection = self._idle_connection() or await self._new_connection()
        self._busy.add(connection)
        exchange = _Exchange(asyncio.get_running_loop())
        connection.exchange = exchange
        assert connection.transport is not None
        connection.transport.write(b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body))
        return connection, exchange

    def _release(self, connection: _Connection, exchange: _Exchange) -> None:
        """The exchange is over: the connection goes back to the pool if the server keeps it alive."""
        self._busy.discard(connection)
        connection.exchange = None
        if exchange.complete and exchange.keep_alive and not connection.closed:
            self._idle.append(connection)
        else:
            connection.close()

    def _idle_connection(self) -> _Connection | None:
        """The connection used last (the one least likely to have been closed by the server meanwhile), else
        the oldest one preconnect opened: a burst of requests takes those in the order they were opened, which
        is the order the server accepted them."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        spares = self._spares
        while spares:
            connection = spares.popleft()
            if not connection.closed:
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            addresses = self._addresses or await self._resolve(loop)
        except OSError as exc:
            self._resolving = None
            raise ModelRequestError(f"cannot connect to {self.url}: {exc}", retryable=True) from exc
        error: OSError | None = None
        for address in addresses:  # in the resolver's order; the first that answers goes first from now on
            try:
                _, connection = await loop.create_connection(
                    lambda: _Connection(self),
                    address[0],
                    address[1],
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                )
            except OSError as exc:
                error = exc
                continue
            if address is not addresses[0]:
                addresses.remove(address)
                addresses.insert(0, address)
            return connection
        if _literal_address(self._host, self._port) is None:
            self._addresses = self._resolving = None  # look up again next time: the server may have moved
        raise ModelRequestError(f"cannot connect to {self.url}: {error}", retryable=True) from error

    async def _resolve(self, loop: asyncio.AbstractEventLoop) -> list[tuple[Any, ...]]:
        """The host's addresses, looked up once for all the connections opened meanwhile (so they keep their order)."""
        if self._resolving is None:
            self._resolving = asyncio.ensure_future(loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM))
        infos = await asyncio.shield(self._resolving)
        if self._addresses is None:
            self._addresses = [info[4] for info in infos]
        return self._addresses


class StreamedResponse:
    """A response read as it arrives; leaving the block early closes the connection (the server stops)."""

    def __init__(self, pool: ConnectionPool, body: bytes, headers: dict[str, str] | None):
        self._pool = pool
        self._body = body
        self._headers = headers
        self._connection: _Connection | None = None
        self._exchange: _Exchange | None = None
        self.status = 0
        self.retry_after: str | None = None

    async def __aenter__(self) -> StreamedResponse:
        self._connection, self._exchange = await self._pool._send(self._body, self._headers)
        self._body = b""  # sent: not held while the server generates
        try:
            while not self._exchange.status and not self._exchange.complete:
                await self._exchange.wait()
        except BaseException:
            self._abandon()
            raise
        self.status = self._exchange.status
        self.retry_after = self._exchange.retry_after
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        connection, exchange = self._connection, self._exchange
        if connection is None or exchange is None:
            return
        if exchange.complete:
            self._pool._release(connection, exchange)
        else:
            self._abandon()

    def _abandon(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._pool._busy.discard(self._connection)

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body in the pieces it arrives in (several received pieces are joined when the reader lags)."""
        exchange = self._exchange
        assert exchange is not None, "use the response inside its async with block"
        while True:
            if exchange.chunks:
                chunks = exchange.chunks
                exchange.chunks = []
                yield chunks[0] if len(chunks) == 1 else b"".join(chunks)
            elif exchange.complete:
                return
            else:
                await exchange.wait()


def _literal_address(host: str, port: int) -> tuple[str, int] | None:
    """An IP address needs no lookup."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return host, port


def _header_lines(headers: dict[str, str]) -> bytes:
    lines = []
    for name, value in headers.items():
        line = f"{name}: {value}\r\n"
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(line)
    return "".join(lines).encode("latin-1")
