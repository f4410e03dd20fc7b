"""with_retries: what its callers rely on beyond "tries again" (the slot, the count, the error, interrupts)."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from langgraph.errors import GraphInterrupt

from pacore_graph.concurrency.retry import with_retries
from pacore_graph.config import RetryPolicy
from pacore_graph.errors import ModelRequestError

QUICK = RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=0.05, jitter=0)


def failing(
    times: int, error: type[BaseException] | BaseException = ConnectionError
) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error if isinstance(error, BaseException) else error("dropped")
        return "ok"

    return calls, attempt


async def test_the_result_comes_with_the_number_of_attempts():
    calls, attempt = failing(2)
    assert await with_retries(attempt, QUICK, None) == ("ok", 3)
    assert len(calls) == 3


async def test_the_last_error_is_raised_unchanged_when_attempts_run_out():
    last = ConnectionError("third")
    errors = iter([ConnectionError("first"), ConnectionError("second"), last])

    async def attempt() -> str:
        raise next(errors)

    with pytest.raises(ConnectionError) as raised:
        await with_retries(attempt, QUICK, None)
    assert raised.value is last


async def test_an_error_the_predicate_refuses_is_raised_after_one_attempt():
    calls, attempt = failing(5, ValueError)
    with pytest.raises(ValueError):
        await with_retries(attempt, QUICK, None)
    assert len(calls) == 1


async def test_an_interrupt_is_raised_at_once_whatever_the_predicate_says():
    calls, attempt = failing(5, GraphInterrupt(()))
    with pytest.raises(GraphInterrupt):
        await with_retries(attempt, QUICK, None, retryable=lambda exc: True)
    assert len(calls) == 1


async def test_a_retry_after_longer_than_allowed_is_the_failure():
    refusal = ModelRequestError("slow down", status=429, retryable=True, retry_after=60.0)
    calls, attempt = failing(5, refusal)
    with pytest.raises(ModelRequestError) as raised:
        await with_retries(attempt, QUICK.model_copy(update={"max_retry_after": 10.0}), None)
    assert raised.value is refusal and len(calls) == 1


async def test_a_retry_after_longer_than_the_backoff_is_waited():
    asked = ModelRequestError("slow down", status=429, retryable=True, retry_after=0.3)
    calls, attempt = failing(1, asked)
    started = asyncio.get_running_loop().time()
    assert await with_retries(attempt, QUICK, None) == ("ok", 2)
    assert asyncio.get_running_loop().time() - started >= 0.3


async def test_the_slot_is_free_during_the_backoff():
    """Another request takes the slot while this one waits to retry; the retry queues for it again."""
    slot = asyncio.Semaphore(1)
    taken_during_backoff = asyncio.Event()
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("dropped")
        return "ok"

    async def other() -> None:
        while not calls:
            await asyncio.sleep(0)
        async with slot:  # free only if the failed attempt gave it back before its backoff
            assert len(calls) == 1
            taken_during_backoff.set()

    result, _ = await asyncio.gather(with_retries(attempt, QUICK, None, slot=slot), other())
    assert result == ("ok", 2) and taken_during_backoff.is_set()


async def test_the_timeout_says_what_ran_out():
    async def attempt() -> str:
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(TimeoutError, match=r"no complete reply within 0.05 s"):
        await with_retries(attempt, QUICK.model_copy(update={"max_attempts": 1}), 0.05)
