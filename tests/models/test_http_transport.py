"""The lean HTTP/1.1 client under the chat model: real sockets, servers that answer in every way HTTP allows.

A raw asyncio server scripts the bytes of each response (length, chunked, until the connection ends,
``Connection: close``, cut midway), so each case is exact; cancellation and keep-alive are checked from
the server's side (connections opened, connections closed).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from waits import await_until

from pacore_graph.errors import ModelRequestError, is_transient
from pacore_graph.models.http import ConnectionPool


class ScriptedServer:
    """Answers each request with ``respond(number, body)`` bytes (None: hold the connection open)."""

    def __init__(self, respond):
        self.respond = respond
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.connections = 0
        self.closed = 0
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                reply = self.respond(len(self.requests), body)
                if reply is None:
                    await reader.read()  # hold until the client hangs up
                    break
                for piece in reply if isinstance(reply, list) else [reply]:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)
                if b"Connection: close" in reply if isinstance(reply, bytes) else False:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


async def closed_within(server: ScriptedServer, seconds: float = 2.0) -> bool:
    """Whether the server saw one connection close within ``seconds`` (and no other)."""
    await await_until(lambda: server.closed >= 1, seconds, what="the server saw the connection close")
    return server.closed == 1


def with_length(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n%s\r\n%s" % (status.encode(), len(body), extra, body)


def chunked(*pieces: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    return [head] + [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]


async def test_keep_alive_reuses_one_connection_and_sends_the_headers_given():
    async with ScriptedServer(lambda n, body: with_length(b'{"n": %d}' % n)) as server:
        pool = ConnectionPool(server.url, {"Authorization": "Bearer k"})
        for n in range(1, 4):
            status, raw, _ = await pool.post(b'{"q": 1}', {"X-Session-ID": f"s{n}"})
            assert (status, json.loads(raw)) == (200, {"n": n})
        await pool.aclose()
    assert server.connections == 1
    head, body = server.requests[2]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and body == b'{"q": 1}'
    assert b"Authorization: Bearer k\r\n" in head and b"X-Session-ID: s3\r\n" in head
    assert b"Content-Type: application/json\r\n" in head


async def test_a_host_name_is_looked_up_once_for_all_connections():
    async with ScriptedServer(lambda n, body: with_length(b"{}")) as server:
        pool = ConnectionPool(server.url.replace("127.0.0.1", "localhost"))
        statuses = await asyncio.gather(*(pool.post(b"{}") for _ in range(5)))
        await pool.aclose()
    assert [reply.status for reply in statuses] == [200] * 5 and server.connections == 5


async def test_chunked_body_arrives_piece_by_piece_and_the_connection_is_reused():
    async with ScriptedServer(lambda n, body: chunked(b"data: one\n\n", b"data: two\n\n")) as server:
        pool = ConnectionPool(server.url)
        for _ in range(2):
            async with pool.stream(b"{}") as response:
                assert response.status == 200
                assert b"".join([piece async for piece in response.iter_chunks()]) == b"data: one\n\ndata: two\n\n"
        await pool.aclose()
    assert server.connections == 1


async def test_a_body_delimited_by_the_end_of_the_connection_is_read_whole():
    reply = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"whole": true}'

    async def serve_once(reader, writer):  # no length, not chunked: the body ends when the server closes
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        for piece in (reply[:40], reply[40:]):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.close()

    server = await asyncio.start_server(serve_once, "127.0.0.1", 0)
    pool = ConnectionPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions")
    for _ in range(2):  # the second on a new connection: the first ended with its body
        status, raw, _ = await pool.post(b"{}")
        assert (status, json.loads(raw)) == (200, {"whole": True})
    await pool.aclose()
    server.close()
    await server.wait_closed()


async def test_connection_close_from_the_server_is_honoured():
    reply = with_length(b"{}", extra=b"Connection: close\r\n")
    async with ScriptedServer(lambda n, body: reply) as server:
        pool = ConnectionPool(server.url)
        for _ in range(2):
            assert (await pool.post(b"{}"))[0] == 200
        await pool.aclose()
    assert server.connections == 2


async def test_a_response_cut_midway_is_a_retryable_error():
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"partial'

    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(cut)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    pool = ConnectionPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions")
    with pytest.raises(ModelRequestError, match="closed the connection") as caught:
        await pool.post(b"{}")
    assert is_transient(caught.value)
    await pool.aclose()
    server.close()
    await server.wait_closed()


async def test_garbage_instead_of_http_is_a_retryable_error():
    async with ScriptedServer(lambda n, body: b"SMTP ready\r\n\r\n") as server:
        pool = ConnectionPool(server.url)
        with pytest.raises(ModelRequestError, match="malformed HTTP response") as caught:
            await pool.post(b"{}")
        assert is_transient(caught.value)
        await pool.aclose()


async def test_no_server_is_a_retryable_connection_error():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    pool = ConnectionPool(f"http://127.0.0.1:{port}/v1/chat/completions")
    with pytest.raises(ModelRequestError, match="cannot connect") as caught:
        await pool.post(b"{}")
    assert is_transient(caught.value)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_cancelled_request_closes_its_connection_so_the_server_stops(streamed):
    async with ScriptedServer(lambda n, body: None) as server:
        pool = ConnectionPool(server.url)

        async def request():
            if streamed:
                async with pool.stream(b"{}") as response:
                    return await response.read()
            return await pool.post(b"{}")

        task = asyncio.create_task(request())
        await await_until(lambda: server.requests, 5, what="the request reached the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await closed_within(server), "the server never saw the connection close"
        await pool.aclose()


async def test_a_stream_left_before_its_end_closes_the_connection():
    async with ScriptedServer(lambda n, body: chunked(b"data: a\n\n")[:2]) as server:  # never finishes
        pool = ConnectionPool(server.url)
        async with pool.stream(b"{}") as response:
            async for piece in response.iter_chunks():
                assert piece == b"data: a\n\n"
                break
        assert await closed_within(server), "the server never saw the connection close"
        await pool.aclose()


async def test_header_values_with_line_breaks_are_refused():
    async with ScriptedServer(lambda n, body: with_length(b"{}")) as server:
        pool = ConnectionPool(server.url)
        with pytest.raises(ValueError, match="line break"):
            await pool.post(b"{}", {"X-Session-ID": "a\r\nX-Injected: 1"})
        await pool.aclose()
    assert not server.requests


async def test_preconnected_connections_carry_the_burst_that_follows():
    async with ScriptedServer(lambda n, body: with_length(b'{"n": %d}' % n)) as server:
        pool = ConnectionPool(server.url)
        pool.preconnect(4)
        pool.preconnect(4)  # already opening: nothing more
        # the burst comes before they are open: it waits for them, in order, instead of opening its own
        replies = await asyncio.gather(*(pool.post(b'{"i": %d}' % i) for i in range(4)))
        assert [reply.status for reply in replies] == [200] * 4
        assert server.connections == 4
        assert [body for _, body in server.requests] == [b'{"i": %d}' % i for i in range(4)]
        pool.preconnect(6)  # 4 idle now: 2 more, which the pool keeps
        await await_until(lambda: len(pool._idle) + len(pool._spares) == 6, 5, what="six connections kept")
        assert server.connections == 6 and len(pool._idle) == 4 and len(pool._spares) == 2
        await pool.aclose()


async def test_a_preconnect_that_fails_is_dropped_quietly_and_close_cancels_those_under_way(caplog):
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    refused = ConnectionPool(f"http://127.0.0.1:{port}/v1/chat/completions")
    refused.preconnect(3)
    await asyncio.gather(*refused._opening)  # each swallowed its error: none is left unretrieved
    assert not refused._spares and not refused._opening
    with pytest.raises(ModelRequestError, match="cannot connect"):  # the request reports it
        await refused.post(b"{}")

    async with ScriptedServer(lambda n, body: with_length(b"{}")) as live:
        closing = ConnectionPool(live.url)
        closing.preconnect(2)
        opening = set(closing._opening)
        await closing.aclose()  # before they ran: cancelled, so no connection outlives the pool
        await asyncio.gather(*opening, return_exceptions=True)
        assert all(task.cancelled() for task in opening) and not closing._opening and not closing._spares
        assert live.connections == 0
    assert "exception was never retrieved" not in caplog.text


async def test_the_chat_explorer_opens_connections_for_the_requests_it_is_told_to_expect():
    from pacore_graph import PaCoReConfig
    from pacore_graph.explorers.protocol import as_explorer
    from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel

    async with ScriptedServer(lambda n, body: with_length(b"{}")) as server:
        model = OpenAICompatibleChatModel(base_url=server.url.removesuffix("/chat/completions"), model="m")
        explorer = as_explorer(model, PaCoReConfig())
        await explorer.expect(3)
        await await_until(lambda: server.connections == 3, 5, what=lambda: f"{server.connections} of 3 connections")
        assert not server.requests
        await model.aclose()
