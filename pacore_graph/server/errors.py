"""Errors the endpoint answers with, in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

OpenAI clients read these fields (the openai SDK raises ``BadRequestError``, ``AuthenticationError``,
``NotFoundError`` by status; litellm maps a 400 about context length to ``ContextWindowExceededError``),
so a refused request says what is wrong in one line, the way the client already knows how to show.

What a client reads is short and names no upstream URL and no credential: a failed run says how its
trajectories failed (``HTTP 503 x4``), an upstream's refusal passes on the upstream's own message (a prompt
too long for the model is the client's to fix); the full account goes to the server's log
(``pacore_graph.server``), passwords in URLs masked.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from typing import Any

from pacore_graph.errors import BudgetExhaustedError, RoundFailedError, redact_credentials
from pacore_graph.inputs import one_line
from pacore_graph.records import RoundRecord

log = logging.getLogger("pacore_graph.server")

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
_MESSAGE_FIELD = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"')
_HINT = re.compile(r"\((the prompt does not fit[^)]*)\)")


class RequestError(Exception):
    """A request the endpoint refuses or could not answer; ``body()`` is OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def http_bytes(self) -> bytes:
        """The whole HTTP/1.1 response, for refusals made below the ASGI app (connection limit, slow head);
        the connection is closed after it."""
        body = json.dumps(self.body()).encode()
        return (
            f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode() + body


REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def failure_error(exc: BaseException) -> RequestError:
    """What a failed PaCoRe run answers: the upstream's own 4xx when every trajectory got the same one
    (a prompt too long for the model is the client's to fix), else 502 saying how the trajectories failed.
    The whole story goes to the server's log."""
    if isinstance(exc, RoundFailedError):
        log.warning("a request failed: %s", redact_credentials(str(exc)))
        return round_failed(exc.round)
    if isinstance(exc, BudgetExhaustedError):
        log.warning("a request failed: %s", redact_credentials(str(exc)))
        return RequestError(502, one_line(str(exc)), type="upstream_error", code="budget_exhausted")
    log.error("a request failed: %s", redact_credentials(f"{type(exc).__name__}: {exc}"), exc_info=exc)
    return internal_error()


def internal_error() -> RequestError:
    return RequestError(
        500,
        "the server failed to answer this request; the details are in its log",
        type="server_error",
        code="internal_error",
    )


def round_failed(round: RoundRecord) -> RequestError:
    failed = [t for t in round.trajectories if t.failed]
    statuses = {t.error_status for t in failed}
    where = f"round {round.round_index + 1}"
    if failed and len(failed) == len(round.trajectories) and len(statuses) == 1:
        status = statuses.pop()
        if status is not None and 400 <= status < 500:
            said = upstream_said(failed[0].error or "")
            return RequestError(
                status,
                f"the upstream refused every trajectory of {where} with HTTP {status}{': ' if said else ''}{said}",
                code="upstream_rejected",
            )
    return RequestError(
        502,
        f"{where}: none of its {round.k} trajectories produced a usable conclusion ({how_they_failed(round)}); "
        "the details are in the server's log",
        type="upstream_error",
        code="round_failed",
    )


def how_they_failed(round: RoundRecord) -> str:
    """``HTTP 503 x3, TimeoutError x1, cut off by the length limit x1``: counts, no URLs or bodies."""
    kinds: Counter[str] = Counter()
    for record in round.trajectories:
        if record.failed:
            kinds[f"HTTP {record.error_status}" if record.error_status else (record.error_type or "error")] += 1
        elif record.truncated:
            kinds["cut off by the length limit"] += 1
        elif record.cut:
            kinds[f"cut ({record.cut})"] += 1
        else:
            kinds["empty conclusion"] += 1
    return ", ".join(f"{kind} x{count}" for kind, count in kinds.most_common())


def upstream_said(error: str) -> str:
    """The upstream's own message from a recorded error (its JSON ``message`` field, or our hint), without URLs."""
    found = _MESSAGE_FIELD.search(error)
    if found:
        try:
            text = json.loads(f'"{found.group(1)}"')
        except ValueError:
            text = found.group(1)
    else:
        hint = _HINT.search(error)
        text = hint.group(1) if hint else ""
    return one_line(_URL.sub("<url>", redact_credentials(text)), 300)
