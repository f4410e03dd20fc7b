"""One value per event loop (a connection pool, a semaphore), forgotten when its loop shuts down.

Why not a ``WeakKeyDictionary`` keyed by the loop: such values refer to their loop (a semaphore's waiters, a
pool's connections, a timer), so the entry would keep its key alive and every loop that ever used a model would
stay in memory (an app or a test suite running ``asyncio.run`` per request). Instead each loop gets a sentinel
async generator, registered with the loop as it starts; the loop's ``shutdown_asyncgens()`` (``asyncio.run``
calls it) closes the sentinel, which drops the loop's entry and closes its value.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """``make()`` once per running loop; ``close(value)`` (if given) when that loop shuts down."""

    def __init__(self, make: Callable[[], T], close: Callable[[T], Awaitable[None]] | None = None):
        self._make = make
        self._close = close
        self._values: dict[asyncio.AbstractEventLoop, tuple[T, AsyncGenerator[None, None]]] = {}
        self._lock = threading.Lock()  # loops in several threads (the sync portal's, the caller's) share it

    def __len__(self) -> int:
        return len(self._values)

    def current(self) -> T | None:
        """The running loop's value if it has one already."""
        entry = self._values.get(asyncio.get_running_loop())
        return entry[0] if entry is not None else None

    def get(self) -> T:
        """The running loop's value, made on first use."""
        loop = asyncio.get_running_loop()
        entry = self._values.get(loop)
        if entry is None:
            with self._lock:
                entry = self._values.get(loop)
                if entry is None:
                    value = self._make()
                    sentinel = self._until_shutdown(loop, value)
                    _first_step(sentinel)  # registers it with the running loop's async-generator hooks
                    entry = self._values[loop] = (value, sentinel)
        return entry[0]

    async def drop(self) -> None:
        """Forget (and close) the running loop's value now, before the loop's shutdown would."""
        entry = self._values.get(asyncio.get_running_loop())
        if entry is not None:
            await entry[1].aclose()

    async def _until_shutdown(self, loop: asyncio.AbstractEventLoop, value: T) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            self._values.pop(loop, None)
            if self._close is not None:
                await self._close(value)


def _first_step(generator: AsyncGenerator[None, None]) -> None:
    """Run ``generator`` to its first ``yield`` synchronously (it awaits nothing before it)."""
    step = generator.__anext__()
    try:
        step.send(None)
    except StopIteration:
        return
    raise RuntimeError("a per-loop sentinel awaited before its first yield")
