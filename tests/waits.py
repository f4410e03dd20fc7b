"""Waits on state, never on time: poll a condition until it holds, and fail with what was seen at the deadline.

A test that must show something does *not* happen waits for a state that proves the system has settled (the
run returned, none of its tasks is left, the server holds no connection) and then checks, instead of sleeping
through a window and hoping the window was long enough.

The one helper of the suite: :func:`wait_until` (and :func:`await_until` on an event loop). The deadline is a bound
on a wait that would otherwise hang, never what decides the outcome. A condition may raise to fail at once (a
process that died while it was awaited: see :func:`still_running`).
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

POLL_SECONDS = 0.02
T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    seconds: float = 20.0,
    *,
    what: str | Callable[[], str] = "",
    every: float = POLL_SECONDS,
) -> T:
    """Block until ``condition()`` is true and return it; at the deadline fail with ``what`` (a callable: said as it
    is then). ``every``: seconds between two looks."""
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what() if callable(what) else what}")
        time.sleep(every)
    return found


async def await_until(
    condition: Callable[[], T | Awaitable[T]],
    seconds: float = 20.0,
    *,
    what: str | Callable[[], str] = "",
    every: float = POLL_SECONDS,
) -> T:
    """``wait_until`` for a test on an event loop: the loop keeps running the code under test while it waits.
    ``condition`` may be a coroutine function (a saver's async reads, say)."""
    deadline = time.monotonic() + seconds
    while True:
        found = condition()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what() if callable(what) else what}")
        await asyncio.sleep(every)


def still_running(process: subprocess.Popen[Any], name: str = "the process") -> bool:
    """True while ``process`` runs; once it has exited, fails the wait at once with its output."""
    if process.poll() is not None:
        out, err = process.communicate()
        raise AssertionError(f"{name} exited with {process.returncode}: {(err or out or '')[-2000:]}")
    return True


def other_tasks() -> set[asyncio.Task[Any]]:
    """The tasks of the running loop besides the caller's: what a finished run must not leave behind."""
    current = asyncio.current_task()
    return {task for task in asyncio.all_tasks() if task is not current}
