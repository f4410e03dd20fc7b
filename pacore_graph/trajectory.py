"""One trajectory: an explorer called with the operator's retries and timeout, then its plain-data record.

The graph runs every trajectory through :func:`explore_once`; so does anything that needs single model
calls with the same retries and token accounting (a benchmark's pool of first-round trajectories).
"""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from pacore_graph.accounting import completion_tokens
from pacore_graph.compaction import compact
from pacore_graph.config import PaCoReConfig
from pacore_graph.episode import EpisodeContext
from pacore_graph.errors import error_status, is_transient
from pacore_graph.records import Trajectory, TrajectoryData
from pacore_graph.retry import with_retries


@dataclass(frozen=True)
class Explored:
    """What one trajectory came to: its raw outcome and record, or (``outcome`` None) the error that ended it
    after retries, with a record saying why."""

    outcome: Trajectory | None
    record: TrajectoryData
    error: Exception | None = None


async def explore_once(
    explorer: Any,
    messages: list[BaseMessage],
    episode: EpisodeContext,
    settings: PaCoReConfig,
    *,
    slot: AbstractAsyncContextManager[Any] | None = None,
) -> Explored:
    """Call ``explorer.explore`` until it succeeds, fails for good, or attempts run out (``settings.retry``);
    each attempt holds ``slot`` and may take ``settings.request_timeout``. Never raises but for cancellation."""
    attempts = 0

    async def attempt() -> Trajectory:
        nonlocal attempts
        attempts += 1
        return await explorer.explore(messages, episode)

    try:
        outcome, _ = await with_retries(attempt, settings.retry, settings.request_timeout, slot=slot)
    except Exception as exc:
        return Explored(None, failure_record(episode.round_index, episode.index, exc, attempts), exc)
    return Explored(outcome, trajectory_record(outcome, episode.round_index, episode.index, attempts, settings))


def trajectory_record(
    outcome: Trajectory, round_index: int, index: int, attempts: int, config: PaCoReConfig
) -> TrajectoryData:
    compacted = compact(outcome.content, outcome.reasoning, outcome.finish_reason)
    conclusion = compacted.conclusion if compacted.conclusion.strip() else ""
    if not conclusion and compacted.truncated and config.truncated_policy == "keep":
        conclusion = outcome.content  # the reference pipeline passes such raw text on
    tokens, approximate = completion_tokens(outcome.completion_tokens, outcome.content, outcome.reasoning)
    return TrajectoryData(
        round_index=round_index,
        index=index,
        conclusion=conclusion,
        tool_calls=[
            {"name": call["name"], "args": call.get("args") or {}, "id": call.get("id") or f"call_{uuid.uuid4().hex}"}
            for call in outcome.tool_calls
        ],
        content_length=len(outcome.content),
        prompt_tokens=outcome.prompt_tokens or 0,
        completion_tokens=tokens,
        tokens_approximate=approximate,
        finish_reason=outcome.finish_reason,
        model_name=outcome.model_name,
        message_id=outcome.message_id,
        truncated=compacted.truncated,
        attempts=attempts,
    )


def failure_record(round_index: int, index: int, exc: BaseException, attempts: int) -> TrajectoryData:
    return TrajectoryData(
        round_index=round_index,
        index=index,
        error=f"{type(exc).__name__}: {exc}"[:2000],
        error_type=type(exc).__name__,
        error_status=error_status(exc),
        error_transient=is_transient(exc),
        attempts=attempts,
    )
