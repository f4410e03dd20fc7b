"""Waits on state, never on time: poll a condition until it holds, and fail with what was seen at the deadline.

A test that must show something does *not* happen waits for a state that proves the system has settled (the
run returned, none of its tasks is left, the server holds no connection) and then checks, instead of sleeping
through a window and hoping the window was long enough.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

POLL_SECONDS = 0.02


def wait_until(condition: Callable[[], Any], seconds: float = 20.0, *, what: str | Callable[[], str] = "") -> None:
    """Block until ``condition()`` is true; at the deadline fail with ``what`` (a callable: said as it is then)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what() if callable(what) else what}")
        time.sleep(POLL_SECONDS)


async def await_until(
    condition: Callable[[], Any], seconds: float = 20.0, *, what: str | Callable[[], str] = ""
) -> None:
    """``wait_until`` for a test on an event loop: the loop keeps running the code under test while it waits."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what() if callable(what) else what}")
        await asyncio.sleep(POLL_SECONDS)


def other_tasks() -> set[asyncio.Task[Any]]:
    """The tasks of the running loop besides the caller's: what a finished run must not leave behind."""
    current = asyncio.current_task()
    return {task for task in asyncio.all_tasks() if task is not current}
