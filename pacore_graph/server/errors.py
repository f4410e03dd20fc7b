"""Errors the endpoint answers with, in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

OpenAI clients read these fields (the openai SDK raises ``BadRequestError``, ``AuthenticationError``,
``NotFoundError`` by status; litellm maps a 400 about context length to ``ContextWindowExceededError``),
so a refused request says what is wrong in one line, the way the client already knows how to show.
"""

from __future__ import annotations

from typing import Any

from pacore_graph.errors import RoundFailedError


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
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def failure_error(exc: BaseException) -> RequestError:
    """What a failed PaCoRe run answers: the upstream's own 4xx when every trajectory got the same one
    (a prompt too long for the model is the client's to fix), else 502 naming why each failed."""
    if isinstance(exc, RoundFailedError):
        statuses = {t.error_status for t in exc.round.trajectories if t.failed}
        if len(statuses) == 1 and (status := statuses.pop()) is not None and 400 <= status < 500:
            return RequestError(status, str(exc), code="upstream_rejected")
        return RequestError(502, str(exc), type="upstream_error", code="round_failed")
    return RequestError(500, f"{type(exc).__name__}: {exc}", type="server_error")
