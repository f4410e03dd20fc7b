"""Errors of a PaCoRe run, and which failures are worth a retry."""

from __future__ import annotations

import asyncio


class PaCoReError(RuntimeError):
    """Base class of the operator's own errors."""


class RoundFailedError(PaCoReError):
    """No trajectory of a round produced a usable conclusion: there is nothing to synthesise over."""


class ModelRequestError(PaCoReError):
    """The server answered a request with an error status or an unusable body."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})


def status_is_retryable(status: int) -> bool:
    """5xx and the few 4xx that mean "later" (timeout, conflict, too early, rate limit)."""
    return status >= 500 or status in RETRYABLE_STATUSES


def is_transient(exc: BaseException) -> bool:
    """Whether a failed model call may succeed if tried again.

    Covers our own client, the openai SDK (which ChatOpenAI raises) and httpx / aiohttp transport errors
    without importing any of them eagerly.
    """
    if isinstance(exc, ModelRequestError):
        return exc.retryable
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    module = type(exc).__module__.split(".")[0]
    name = type(exc).__name__
    if module == "aiohttp":
        return name != "InvalidURL"
    if module in {"openai", "httpx", "httpcore"}:
        status = getattr(exc, "status_code", None)
        if status is not None:
            return status_is_retryable(int(status))
        return name in {
            "APIConnectionError",
            "APITimeoutError",
            "ConnectError",
            "ReadTimeout",
            "RemoteProtocolError",
            "ReadError",
            "WriteError",
            "ConnectTimeout",
            "PoolTimeout",
            "TimeoutException",
        }
    status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
    if isinstance(status, int):
        return status_is_retryable(status)
    return False
