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

    def semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            with self._lock:
                semaphore = self._semaphores.setdefault(loop, asyncio.Semaphore(self.limit))
        return semaphore
