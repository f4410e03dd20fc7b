"""Errors of a PaCoRe run, which failures are worth a retry, and error text kept free of credentials.

Callers test types and fields, never message text: a :class:`RoundFailedError` carries its round's
:class:`~pacore_graph.records.RoundRecord`; a :class:`ModelRequestError` its HTTP status.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import os
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pacore_graph.records import RoundRecord


class PaCoReError(RuntimeError):
    """Base class of the operator's own errors."""


class UsageError(PaCoReError, ValueError):
    """What was given cannot be used (an argument, a value, a path, a file, a folder made for other settings):
    nothing was started. A ``ValueError``, as every refusal of a bad input is here, so a command exits with the
    usage status (2) for it; a ``PaCoReError``, so callers that catch the operator's errors catch it too."""


class RoundFailedError(PaCoReError):
    """No trajectory of a round produced a usable conclusion: there is nothing to synthesise over.

    ``round`` holds every trajectory's record (its error, HTTP status, whether that error was
    transient, or why its conclusion was unusable); ``finished`` the rounds before it, with every record
    and its token counts (the proposals of a failed synthesis). Resuming the thread
    (``invoke(None, config)``) runs the failed trajectories of that round again; finished rounds are kept.
    """

    def __init__(self, round: RoundRecord, finished: Sequence[RoundRecord] = ()):
        self.round = round
        self.finished = list(finished)
        message = describe_failed_round(round)
        if self.finished:
            kept = sum(len(done.trajectories) for done in self.finished)
            tokens = sum(done.completion_tokens for done in self.finished)
            message += (
                f" (kept from the {len(self.finished)} round(s) before it: {kept} trajectories, {tokens} completion "
                "tokens, in error.finished)"
            )
        super().__init__(message)

    def __reduce__(self) -> tuple[type[RoundFailedError], tuple[RoundRecord, list[RoundRecord]]]:
        return (type(self), (self.round, self.finished))

    @property
    def completion_tokens(self) -> int:
        """Tokens spent by the run up to the failure: the finished rounds' and the failed round's."""
        return self.round.completion_tokens + sum(done.completion_tokens for done in self.finished)

    @property
    def round_index(self) -> int:
        return self.round.round_index

    @property
    def transient(self) -> bool:
        """Some trajectory failed for a reason that may pass: trying the round again later may work."""
        return self.round.transient


class BudgetExhaustedError(PaCoReError):
    """A token budget or deadline ran out before any trajectory had a conclusion: there is no answer to give.

    ``reason`` is ``budget_tokens`` or ``deadline``; ``round`` holds the round it cut.
    """

    def __init__(self, reason: str, round: RoundRecord):
        self.reason = reason
        self.round = round
        what = "the token budget" if reason == "budget_tokens" else "the deadline"
        super().__init__(
            f"{what} ran out in round {round.round_index + 1} before any trajectory finished with a conclusion "
            f"({len(round.trajectories)} cut or failed): raise the budget"
        )

    def __reduce__(self) -> tuple[type[BudgetExhaustedError], tuple[str, RoundRecord]]:
        return (type(self), (self.reason, self.round))


class DiskFullError(PaCoReError, OSError):
    """The disk a run writes to is full (its checkpoints or its results). The run stops at the first write that
    fails (a row is written whole or not at all, a checkpoint in one transaction); once there is space again,
    the same command goes on from there."""

    def __init__(self, where: object, cause: BaseException | str):
        self.where = where
        self.cause = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        super().__init__(
            f"the disk holding {where} is full ({self.cause}): free some space on it, then run the same command "
            "again to go on"
        )

    def __reduce__(self) -> tuple[type[DiskFullError], tuple[object, str]]:
        return (type(self), (self.where, self.cause))


def is_disk_full(exc: BaseException, where: str | os.PathLike[str] | None = None) -> bool:
    """A write failed for want of space: ENOSPC or EDQUOT, SQLite's "database or disk is full", or (as SQLite
    also says when its journal cannot grow) "disk I/O error" while ``where`` has under 1 MiB free."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if "disk is full" in str(exc):
        return True
    if "disk I/O error" in str(exc) and where is not None:
        try:
            return shutil.disk_usage(where).free < 1 << 20
        except OSError:
            return False
    return False


def stop_if_disk_full(exc: BaseException, where: str | os.PathLike[str]) -> None:
    """Raise :class:`DiskFullError` in place of ``exc`` when it is a write that failed for want of space at
    ``where`` (the run stops there); return otherwise, for the caller to go on or raise ``exc``."""
    if is_disk_full(exc, where):
        raise DiskFullError(where, exc) from None


class ModelRequestError(PaCoReError):
    """The server answered a request with an error status or an unusable body; ``retry_after``: the seconds its
    Retry-After header asked for (429 and 503 only), which a retry waits at least; ``usage``: the tokens the
    server reported for it (a body or stream that broke after its usage), which the trajectory still spent."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        usage: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.usage = usage


def reported_usage(exc: BaseException) -> tuple[int, int]:
    """(prompt, completion) tokens a failed attempt spent, as its server reported them; (0, 0) when it did not.
    Any error may carry them as ``usage`` (OpenAI's field names), an agent episode's failure as well."""
    usage = getattr(exc, "usage", None)
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = (usage.get(name) for name in ("prompt_tokens", "completion_tokens"))
    return _count(prompt), _count(completion)


def _count(number: object) -> int:
    return number if isinstance(number, int) and number > 0 else 0


CUT_REASONS = {
    "early_stop": "early stop: its round's answers agreed",
    "budget_tokens": "the token budget ran out",
    "deadline": "the deadline passed",
}


def describe_failed_round(round: RoundRecord) -> str:
    """One line: which round, and why each of (at most five of) its trajectories gave nothing."""
    reasons = []
    for record in round.trajectories:
        if record.failed:
            reasons.append(f"#{record.index} failed after {record.attempts} attempt(s): {record.error}")
        elif record.cut:
            why = CUT_REASONS.get(record.cut, record.cut)
            reasons.append(f"#{record.index} was cut before it finished ({why})")
        elif record.truncated:
            reasons.append(f"#{record.index} was cut off by the length limit before any conclusion")
        else:
            reasons.append(f"#{record.index} returned an empty conclusion")
    shown = "; ".join(reasons[:5]) + (f"; ... ({len(reasons) - 5} more)" if len(reasons) > 5 else "")
    return (
        f"round {round.round_index + 1}: none of its {round.k} trajectories produced a usable "
        f"conclusion, so there is nothing to pass on: {shown}"
    ).replace("\n", " ")


RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
RETRY_AFTER_STATUSES = frozenset({429, 503})  # where a server's Retry-After means "wait this long, then retry"


def retry_after_seconds(header: str | None, now: float | None = None) -> float | None:
    """A Retry-After header's wait in seconds: delta-seconds or an HTTP date (RFC 9110); None if unreadable."""
    if not header:
        return None
    if header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def status_is_retryable(status: int) -> bool:
    """5xx and the few 4xx that mean "later" (timeout, conflict, too early, rate limit)."""
    return status >= 500 or status in RETRYABLE_STATUSES


def _classes(module: str, *names: str) -> tuple[type, ...]:
    """Exception classes of ``module`` if it is already imported: an error of a library we never loaded
    cannot be one of its classes, so nothing is imported just to classify."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, name) for name in names if hasattr(loaded, name)) if loaded else ()


def error_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (our client, openai, httpx, aiohttp), if any."""
    for attribute in ("status", "status_code"):
        status = getattr(exc, attribute, None)
        if isinstance(status, int):
            return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether a failed model call may succeed if tried again, decided by the error's class.

    Covers our own client, LangChain's typed model errors (which ChatOpenAI raises), the openai SDK,
    and httpx / aiohttp transport errors.
    """
    if isinstance(exc, ModelRequestError):
        return exc.retryable
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    model_error = _classes("langchain_core.exceptions", "ModelError")
    if model_error and isinstance(exc, model_error):
        return bool(getattr(exc, "is_retryable", False))
    if isinstance(exc, _classes("openai", "APIConnectionError")):  # APITimeoutError included
        return True
    if isinstance(exc, _classes("httpx", "TransportError")) or isinstance(exc, _classes("httpcore", "NetworkError")):
        return True
    if isinstance(exc, _classes("httpcore", "TimeoutException", "RemoteProtocolError")):
        return True
    if isinstance(exc, _classes("aiohttp", "ClientError")) and not isinstance(exc, _classes("aiohttp", "InvalidURL")):
        status = error_status(exc)
        return status is None or status_is_retryable(status)
    status = error_status(exc)
    return status is not None and status_is_retryable(status)


_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):[^/\s@]*@")


def redact_credentials(text: str) -> str:
    """``text`` with the password of every URL's ``user:password@`` replaced by ``***``: a URL given with
    credentials (``--base-url http://user:pw@host/v1``) may appear in an error message or a log line."""
    return _URL_PASSWORD.sub(r"\1:***@", text)
