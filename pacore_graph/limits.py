"""A run-wide bound on in-flight trajectories.

LangGraph's ``max_concurrency`` limits each graph run separately, so nested fan-outs multiply (64
problems x 32 trajectories). One limiter shared by every run of an operator bounds the real load on the
server. asyncio semaphores belong to one event loop, so there is one per loop.
"""

from __future__ import annotations

import asyncio
import threading
import weakref


class ConcurrencyLimiter:
    def __init__(self, limit: int):
        self.limit = limit
        self._semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def slot(self) -> Slot:
        """A trajectory's hold on this limit (see :class:`Slot`)."""
        return Slot(self.semaphore())

    def semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            with self._lock:
                semaphore = self._semaphores.setdefault(loop, asyncio.Semaphore(self.limit))
        return semaphore


class Slot:
    """One trajectory's place under the limit, taken before the trajectory builds its request (so that the
    trajectories still queued hold little: at 1024 in flight, as many again may be waiting) and then used
    by its retries as their ``slot``: the first attempt runs in it, a retry takes it again after its
    backoff. :meth:`drop` gives it back if no attempt did (the trajectory was cut or failed first)."""

    __slots__ = ("semaphore", "held")

    def __init__(self, semaphore: asyncio.Semaphore):
        self.semaphore = semaphore
        self.held = False

    async def take(self) -> None:
        await self.semaphore.acquire()
        self.held = True

    async def __aenter__(self) -> None:
        if not self.held:
            await self.take()

    async def __aexit__(self, *exc_info: object) -> None:
        self.drop()

    def drop(self) -> None:
        if self.held:
            self.held = False
            self.semaphore.release()
