"""Sync wrappers over the async-first API: one long-lived event loop in a daemon thread.

A fresh ``asyncio.run`` per call would throw away pooled HTTP connections (they belong to one loop) and
cannot be used where a loop is already running (notebooks, sync nodes inside async graphs). anyio's blocking
portal would do this at twice the CPU per call (docs/performance.md, "Libraries and what they cost").

Ctrl-C: a sync caller waiting here gets the KeyboardInterrupt; the coroutine it started on the
background loop is then cancelled (its HTTP requests closed) before the interrupt goes on, so an
interrupted run stops spending tokens.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

CANCEL_GRACE_SECONDS = 10.0  # how long an interrupted caller waits for its cancelled work to wind down

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


class CancelScope:
    """What :func:`run_sync` starts while this scope is current (see :func:`cancel_scope`) is cancelled when the
    scope is: a sync call that an async caller gave up on (a timeout) closes its requests instead of running on
    in its thread."""

    def __init__(self) -> None:
        self.cancelled = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            tasks = list(self._tasks)
        for task in tasks:
            task.get_loop().call_soon_threadsafe(task.cancel)

    def _enter(self, task: asyncio.Task[Any]) -> None:
        """On the task's loop, as it starts."""
        with self._lock:
            if self.cancelled:
                task.cancel()
                return
            self._tasks.add(task)
        task.add_done_callback(self._leave)

    def _leave(self, task: asyncio.Task[Any]) -> None:
        with self._lock:
            self._tasks.discard(task)


_SCOPE: contextvars.ContextVar[CancelScope | None] = contextvars.ContextVar("pacore_cancel_scope", default=None)


def cancel_scope(context: contextvars.Context, scope: CancelScope) -> None:
    """Make ``scope`` current in ``context`` (the copy a sync call runs in)."""
    context.run(_SCOPE.set, scope)


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_loop.run_forever, name="pacore-sync-loop", daemon=True)
            thread.start()
            atexit.register(_shut_down, _loop, thread)
        return _loop


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """At exit: finalize the loop's async generators (which closes the pooled HTTP connections), then the loop."""
    if not loop.is_running():
        return
    try:
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result(timeout=5)
    except (concurrent.futures.TimeoutError, RuntimeError):
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    if not thread.is_alive():
        loop.close()


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, whatever loop the caller is in.

    It runs in a copy of the caller's context (LangGraph's config and runtime, tracing), and is
    cancelled if the caller is interrupted while it waits.
    """
    loop = _background_loop()
    context = contextvars.copy_context()
    scope = _SCOPE.get()
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
    started: list[asyncio.Task[T]] = []  # filled on the loop; callbacks run in order, so before any cancel

    def finish(task: asyncio.Task[T]) -> None:
        if task.cancelled():  # an exception, not cancel(): futures.wait() sees only a notified cancel
            outcome.set_exception(concurrent.futures.CancelledError())
        elif (error := task.exception()) is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(task.result())

    def start() -> None:
        task = loop.create_task(coroutine, context=context)
        started.append(task)
        task.add_done_callback(finish)
        if scope is not None:
            scope._enter(task)

    loop.call_soon_threadsafe(start)
    try:
        return outcome.result()
    except BaseException:
        if not outcome.done():  # the caller was interrupted while waiting: stop the work, then go on
            loop.call_soon_threadsafe(lambda: [task.cancel() for task in started])
            concurrent.futures.wait([outcome], timeout=CANCEL_GRACE_SECONDS)
        raise


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from sync code: it runs on the background loop (in a copy of the caller's
    context) and is cancelled when the caller stops early or is interrupted."""
    loop = _background_loop()
    context = contextvars.copy_context()
    received: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    started: list[asyncio.Task[None]] = []

    async def pump() -> None:
        try:
            async for item in items:
                received.put((True, item))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, cancellation included
            received.put((False, exc))
        else:
            received.put((False, None))

    loop.call_soon_threadsafe(lambda: started.append(loop.create_task(pump(), context=context)))
    try:
        while True:
            more, value = received.get()
            if more:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        loop.call_soon_threadsafe(lambda: [task.cancel() for task in started])
