"""One pooled aiohttp session per event loop, closed when that loop shuts down.

Why per loop: a session belongs to the loop it was made in (``asyncio.run`` per call, the sync
wrappers' background loop, a server's loop). Why the closing trick: nobody calls ``aclose`` on a model
inside a graph, and a session left for the garbage collector prints "Unclosed client session" at exit.
Each session is held by a small async generator started in its loop; ``asyncio.run`` (and every loop
shut down properly, the sync wrappers' included) finalizes live async generators, which closes it.
A loop closed without that (a bare ``loop.close()``, as some test runners do) can run nothing any more:
once it is gone, its session and connector are marked closed (their sockets went with it).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import weakref
from collections.abc import AsyncIterator

import aiohttp


async def _hold(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await session.close()


def _abandon(session: aiohttp.ClientSession) -> None:
    """The session's loop is gone without closing it: mark it closed (no "Unclosed client session" at exit)."""
    if session.closed:
        return
    connector = session.connector
    session.detach()
    if connector is None:
        return
    closing = connector.close()  # its loop is closed: this only marks it closed, in one step
    if inspect.iscoroutine(closing):
        try:
            closing.send(None)
        except (StopIteration, RuntimeError):
            pass
        finally:
            closing.close()


class SessionPool:
    """The session of the running loop, made on first use with the given headers and timeout."""

    def __init__(self, headers: dict[str, str], total_timeout: float | None):
        self.headers = headers
        self.total_timeout = total_timeout
        self._sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> (session, holder)

    async def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is not None and not entry[0].closed:
            return entry[0]
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=60)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.total_timeout),
            headers=self.headers,
            json_serialize=json.dumps,
        )
        holder = _hold(session)
        self._sessions[loop] = (session, holder)
        weakref.finalize(loop, _abandon, session).atexit = False  # at exit the loop's own shutdown closes it
        await holder.__anext__()  # registers with the loop: closed by its shutdown_asyncgens()
        return session

    async def aclose(self) -> None:
        """Close the running loop's session now (the loop's shutdown would close it too)."""
        entry = self._sessions.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()
