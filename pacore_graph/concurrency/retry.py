"""Retry one trajectory on transient failures with exponential backoff and jitter, or after the wait a
server's Retry-After asked for (429, 503), when it asked for longer.

Not tenacity: its loop costs about 17 us more per call, and this runs twice per trajectory, about 3-4% of the
client's CPU (docs/performance.md, "Libraries and what they cost"); what is ours would stay ours there too (which
errors to retry, how long to wait, the slot, the timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from langgraph.errors import GraphBubbleUp

from pacore_graph.config import RetryPolicy
from pacore_graph.errors import is_transient

T = TypeVar("T")


def backoff_delay(policy: RetryPolicy, retry_number: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``retry_number`` (1-based); ``rng`` for a repeatable jitter."""
    delay = min(policy.max_delay, policy.initial_delay * policy.backoff ** (retry_number - 1))
    draw = rng.random() if rng is not None else random.random()
    return delay * (1 - policy.jitter + policy.jitter * draw)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    timeout: float | None,
    *,
    slot: AbstractAsyncContextManager[Any] | None = None,
    retryable: Callable[[Exception], bool] = is_transient,
) -> tuple[T, int]:
    """Run ``attempt`` until it succeeds, an error ``retryable`` refuses occurs, or attempts run out.

    ``slot`` (a semaphore, say) is held around each attempt but not during backoff sleeps, and the
    ``timeout`` starts once the slot is held: time queued behind other requests is not generation time.
    Returns the result and the number of attempts; raises the last error otherwise, unchanged (a caller
    that needs the count of failed attempts counts the calls of ``attempt``). LangGraph's interrupts
    (``GraphBubbleUp``) are raised at once, whatever ``retryable`` says.
    """
    gate = slot if slot is not None else contextlib.nullcontext()
    for number in range(1, policy.max_attempts + 1):
        try:
            async with gate:
                if timeout is None:
                    return await attempt(), number
                try:
                    async with asyncio.timeout(timeout):
                        return await attempt(), number
                except TimeoutError as exc:  # asyncio's says nothing: say what ran out, and how long it was
                    limit = f"no complete reply within {timeout:g} s (PaCoReConfig.request_timeout)"
                    raise TimeoutError(limit) from exc
        except Exception as exc:
            if isinstance(exc, GraphBubbleUp) or number == policy.max_attempts or not retryable(exc):
                raise  # an interrupt (or a Command for the parent graph) is LangGraph's, never a failure
            asked = getattr(exc, "retry_after", None)
            if asked is not None and asked > policy.max_retry_after:
                raise  # the server will not take a retry within the wait allowed: its answer is the failure
            await asyncio.sleep(max(backoff_delay(policy, number), asked or 0.0))
    raise AssertionError("unreachable")
