"""Sync wrappers over the async-first API: one long-lived event loop in a daemon thread.

A fresh ``asyncio.run`` per call would throw away pooled HTTP sessions (they belong to one loop) and
cannot be used where a loop is already running (notebooks, sync nodes inside async graphs).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="pacore-sync-loop", daemon=True).start()
        return _loop


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, whatever loop the caller is in."""
    return asyncio.run_coroutine_threadsafe(coroutine, _background_loop()).result()
