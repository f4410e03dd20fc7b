"""One trajectory's exploration: an explorer called with the operator's retries and timeout, then its
plain-data record.

The graph runs every trajectory through an :class:`Exploration`; so does anything that needs single model
calls with the same retries and token accounting (a benchmark's pool of first-round trajectories).
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

from langchain_core.messages import BaseMessage

from pacore_graph.concurrency.retry import with_retries
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import error_status, is_transient, reported_usage
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.explorers.protocol import Explorer
from pacore_graph.graph.compat import ReferenceRetries, passes_on, pipeline_conclusion
from pacore_graph.records import ToolCallData, Trajectory, TrajectoryData, TrajectoryRecord, usable
from pacore_graph.synthesis.compaction import compact
from pacore_graph.synthesis.tokens import completion_tokens


class Exploration:
    """``explorer.explore(messages, episode)`` as the operator runs it: retried on transient failures
    (``config.retry``), each attempt holding ``slot`` and limited to ``config.request_timeout``.

    ``attempts`` counts the attempts made so far, also when the work is cancelled midway; ``failed_tokens`` the
    (prompt, completion) tokens that failed attempts spent, as far as their servers reported them. With
    ``compat="reference"`` the reference pipeline's retry rule holds
    (:class:`~pacore_graph.graph.compat.ReferenceRetries`): ``uncapped``, the same explorer without
    ``max_tokens``, takes over after a refusal as too long.
    """

    def __init__(
        self,
        explorer: Explorer,
        messages: list[BaseMessage],
        episode: EpisodeContext,
        config: PaCoReConfig,
        *,
        uncapped: Explorer | None = None,
    ):
        self.explorer = explorer
        self.messages = messages
        self.episode = episode
        self.config = config
        self.attempts = 0
        self.failed_tokens = (0, 0)
        self._began: float | None = None  # the first attempt's start (a panel's records keep the seconds)
        reference = config.compat == "reference"
        self._uncapped = uncapped or explorer
        self._retries = ReferenceRetries(capped=self._uncapped is not explorer) if reference else None

    async def _attempt(self) -> Trajectory:
        self.attempts += 1
        if self._began is None:
            self._began = time.monotonic()
        explorer = self.explorer if self._retries is None or self._retries.capped else self._uncapped
        try:
            return await explorer.explore(self.messages, self.episode)
        except Exception as exc:
            prompt, completion = reported_usage(exc)
            self.failed_tokens = (self.failed_tokens[0] + prompt, self.failed_tokens[1] + completion)
            raise

    async def explore(self, *, slot: AbstractAsyncContextManager[Any] | None = None) -> Trajectory:
        """The trajectory; the last error when it still fails after its retries."""
        config = self.config
        retryable = is_transient if self._retries is None else self._retries.retryable
        outcome, _ = await with_retries(
            self._attempt, config.retry, config.request_timeout, slot=slot, retryable=retryable
        )
        return outcome

    def record(self, outcome: Trajectory) -> TrajectoryData:
        """What a run keeps of it (see :func:`trajectory_data`), its failed attempts' tokens counted in."""
        record = trajectory_data(outcome, self.episode, self.config, self.attempts)
        return self._timed(with_failed_tokens(record, self.failed_tokens))

    def failure(self, exc: BaseException) -> TrajectoryData:
        """The record of a trajectory that failed for good (see :func:`failure_data`), with the tokens its
        attempts spent."""
        record = failure_data(exc, self.episode.round_index, self.episode.index, self.attempts, self.episode.model)
        return self._timed(with_failed_tokens(record, self.failed_tokens))

    def _timed(self, record: TrajectoryData) -> TrajectoryData:
        """A panel's record keeps the seconds its trajectory took (retries included): wall per model."""
        if self.episode.model is not None and self._began is not None:
            record["seconds"] = round(time.monotonic() - self._began, 3)
        return record


def trajectory_data(
    outcome: Trajectory, episode: EpisodeContext, config: PaCoReConfig, attempts: int = 0
) -> TrajectoryData:
    """What a run keeps of it: its conclusion (compacted) and counts, tokens from usage or counted.
    With ``compat="reference"`` the conclusion is the reference pipeline's text: what follows the last
    ``</think>`` or the whole reply, and the final call's raw reply."""
    compacted = compact(outcome.content, outcome.reasoning, outcome.finish_reason)
    conclusion = compacted.conclusion if compacted.conclusion.strip() else ""
    if config.compat == "reference":
        conclusion = outcome.content if episode.final else pipeline_conclusion(outcome.content)
    elif not conclusion and compacted.truncated and config.truncated_policy == "keep":
        conclusion = outcome.content  # the reference pipeline passes such raw text on
    tokens, approximate = completion_tokens(outcome.completion_tokens, outcome.content, outcome.reasoning)
    record = TrajectoryData(
        round_index=episode.round_index,
        index=episode.index,
        conclusion=conclusion,
        tool_calls=[_tool_call(call) for call in outcome.tool_calls],
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
    if episode.model is not None:  # a panel run: the slot's model, by its panel name
        record["model"] = episode.model
    return record


def failure_data(
    exc: BaseException, round_index: int, index: int, attempts: int = 0, model: str | None = None
) -> TrajectoryData:
    """The record of a trajectory that failed for good: why, with the error's class, status and kind (and in a
    panel run, its slot's model)."""
    record = TrajectoryData(
        round_index=round_index,
        index=index,
        error=f"{type(exc).__name__}: {exc}"[:2000],
        error_type=type(exc).__name__,
        error_status=error_status(exc),
        error_transient=is_transient(exc),
        attempts=attempts,
    )
    if model is not None:
        record["model"] = model
    return record


def with_failed_tokens(record: TrajectoryData, failed_tokens: tuple[int, int]) -> TrajectoryData:
    """``record`` with the tokens of its failed attempts added: they were spent on this trajectory (usage and
    TTC count compute spent, not only the reply kept)."""
    prompt, completion = failed_tokens
    if prompt or completion:
        record["prompt_tokens"] = record.get("prompt_tokens", 0) + prompt
        record["completion_tokens"] = record.get("completion_tokens", 0) + completion
    return record


def _tool_call(call: dict[str, Any]) -> ToolCallData:
    """A call as state keeps it; one without an id gets one (a ToolNode answers calls by id)."""
    return ToolCallData(name=call["name"], args=call.get("args") or {}, id=call.get("id") or f"call_{uuid.uuid4().hex}")


def passed_on(trajectory: Trajectory, config: PaCoReConfig) -> str | None:
    """The text a first-round trajectory passes on to the next round under ``config`` (its compacted
    conclusion, with its tool calls rendered), or None when the operator drops it (no conclusion).

    For work outside a run that must see trajectories exactly as the operator's next round does: the
    message sets of PaCoRe training data, say.
    """
    record = trajectory_data(trajectory, EpisodeContext(round_index=0, index=0), config)
    passes = passes_on if config.compat == "reference" else usable
    return TrajectoryRecord.model_validate(record).reference if passes(record) else None
