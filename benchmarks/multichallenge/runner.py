"""Run MultiChallenge: respond through PaCoReNode, judge, append one row per (conversation, sample).

Resume works at two levels. Finished rows are in ``results.jsonl`` and are never redone. A row in flight
when the run was killed resumes from its LangGraph checkpoint (SQLite, ``checkpoints.sqlite``): finished
trajectories of the interrupted round, and a finished but unjudged response, are not computed again.

Failures are sorted into three kinds, so that nothing wrong ever counts as a pass and nothing
transient is written down as final:
- a response the server refuses for good (HTTP 4xx such as a context overflow, or no trajectory with a
  conclusion) is recorded as an error row (not passed);
- a judge reply that stays unreadable, or a judge request refused for good, is recorded as a judge error;
- anything transient (connection lost, 5xx after the operator's retries) leaves the row unfinished: the
  next run into the same folder does it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import BaseModel

from pacore_benchmarks.multichallenge.data import Conversation
from pacore_benchmarks.multichallenge.judge import Judge
from pacore_benchmarks.multichallenge.settings import RunSettings
from pacore_benchmarks.results import ResultsFile
from pacore_graph import ModelRequestError, PaCoReConfig, PaCoReNode, RoundFailedError, RoundRecord
from pacore_graph.errors import is_transient

RESULTS_NAME = "results.jsonl"
CHECKPOINTS_NAME = "checkpoints.sqlite"
# A response error caused by the request itself: retrying the same request cannot help.
_PERMANENT_STATUSES = frozenset({400, 413, 422})
_JUDGE_CALL_ATTEMPTS = 4


def row_key(row: dict[str, Any]) -> tuple[str, int]:
    return (row["question_id"], int(row["sample"]))


def open_results(output: Path) -> ResultsFile:
    return ResultsFile(output / RESULTS_NAME, key=row_key)


class Unfinished(Exception):
    """A row could not be finished for a transient reason; a rerun will try it again.

    ``keep_checkpoint``: the checkpoint holds work worth resuming from (an answer awaiting its judge).
    A failed round is recorded in the checkpoint as failed trajectories, so resuming from it would
    only fail again: such rows start afresh.
    """

    def __init__(self, message: str, *, keep_checkpoint: bool = False):
        super().__init__(message)
        self.keep_checkpoint = keep_checkpoint


class RunOutcome(BaseModel):
    written: int = 0
    unfinished: list[str] = []  # "qid#sample: reason"


def pacore_config(settings: RunSettings, context_window: int | None) -> PaCoReConfig:
    return PaCoReConfig(
        rounds=settings.rounds,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        seed=settings.seed,
        context_window=context_window,
    )


def build_chat_graph(model: BaseChatModel, config: PaCoReConfig) -> StateGraph:
    """The chat use of the operator: a messages graph whose one node is PaCoRe."""
    builder = StateGraph(MessagesState)
    builder.add_node("respond", PaCoReNode(model, config))
    builder.add_edge(START, "respond")
    return builder


def _is_permanent(error: RoundFailedError) -> bool:
    """Some trajectory was refused for its request (400/413/422), cut off, or gave an empty conclusion."""
    return any(
        t.error_status in _PERMANENT_STATUSES if t.failed else not t.usable for t in error.round.trajectories
    )


def _rounds_for_row(pacore: dict[str, Any]) -> list[dict[str, Any]]:
    """Per round: its references (conclusions passed on) and per-trajectory counts, no reasoning."""
    rounds = []
    for data in pacore.get("rounds", []):
        record = RoundRecord.model_validate(data)
        rounds.append(
            {
                "round_index": record.round_index,
                "k": record.k,
                "references": record.references,
                "trajectories": [
                    {
                        key: t.get(key)
                        for key in (
                            "index",
                            "completion_tokens",
                            "prompt_tokens",
                            "finish_reason",
                            "truncated",
                            "error",
                            "attempts",
                        )
                    }  # fmt: skip
                    for t in data["trajectories"]
                ],
            }
        )
    return rounds


class MultiChallengeRunner:
    """Runs pending (conversation, sample) pairs concurrently, ``settings.concurrency`` at a time."""

    def __init__(
        self,
        settings: RunSettings,
        *,
        responder: BaseChatModel,
        judge_model: BaseChatModel,
        results: ResultsFile,
        checkpointer: Any = None,
        context_window: int | None = None,
        judge_formats: tuple[dict[str, Any] | None, ...] | None = None,
        config: PaCoReConfig | None = None,
    ):
        self.settings = settings
        self.results = results
        self.checkpointer = checkpointer
        graph = build_chat_graph(responder, config or pacore_config(settings, context_window))
        self.graph = graph.compile(checkpointer=checkpointer)
        self.judge = Judge(
            judge_model,
            prompt=settings.judge_prompt,
            attempts=settings.judge_attempts,
            max_tokens=settings.judge_max_tokens,
            formats=judge_formats,
        )

    def pending(self, conversations: list[Conversation]) -> list[tuple[Conversation, int]]:
        done = self.results.done()
        return [
            (conv, sample)
            for conv in conversations
            for sample in range(self.settings.samples)
            if (conv.question_id, sample) not in done
        ]

    async def arun(
        self,
        conversations: list[Conversation],
        *,
        on_done: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> RunOutcome:
        outcome = RunOutcome()
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def one(conv: Conversation, sample: int) -> None:
            async with semaphore:
                try:
                    row = await self.run_one(conv, sample)
                except Unfinished as exc:
                    outcome.unfinished.append(f"{conv.question_id}#{sample}: {exc}")
                    row = None
                    if not exc.keep_checkpoint:
                        await self._forget(conv, sample)
                else:
                    self.results.append(row)
                    await self._forget(conv, sample)
                    outcome.written += 1
            if on_done is not None:
                on_done(row)

        await asyncio.gather(*(one(conv, sample) for conv, sample in self.pending(conversations)))
        return outcome

    # ---------------------------------------------------------------- one row

    def _thread(self, conv: Conversation, sample: int) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"{conv.question_id}#{sample}"}}

    async def _forget(self, conv: Conversation, sample: int) -> None:
        """The row is on disk: its checkpoint is no longer needed."""
        if self.checkpointer is not None:
            await self.checkpointer.adelete_thread(self._thread(conv, sample)["configurable"]["thread_id"])

    async def respond(self, conv: Conversation, sample: int) -> AIMessage:
        """The final answer, resumed from the checkpoint when this row was interrupted."""
        config = self._thread(conv, sample)
        graph_input: dict[str, Any] | None = {"messages": conv.messages()}
        if self.checkpointer is not None:
            snapshot = await self.graph.aget_state(config)
            messages = snapshot.values.get("messages", []) if snapshot.values else []
            if len(messages) > len(conv.conversation) and not snapshot.next:
                return messages[-1]  # answered before the kill, not yet judged
            if snapshot.next:
                graph_input = None  # resume the interrupted run from its checkpoint
        state = await self.graph.ainvoke(graph_input, config)
        return state["messages"][-1]

    async def _judge(self, response: str, question: str):
        for attempt in range(1, _JUDGE_CALL_ATTEMPTS + 1):
            try:
                return await self.judge.ajudge(response, question), None
            except Exception as exc:  # noqa: BLE001 - sorted into transient / permanent below
                if isinstance(exc, ModelRequestError) and not exc.retryable:
                    return None, f"judge request refused: {exc}"[:2000]
                if not is_transient(exc) or attempt == _JUDGE_CALL_ATTEMPTS:
                    message = f"judge call failed: {type(exc).__name__}: {exc}"[:500]
                    raise Unfinished(message, keep_checkpoint=True) from exc
                await asyncio.sleep(2.0 * attempt)
        raise AssertionError("unreachable")

    async def run_one(self, conv: Conversation, sample: int) -> dict[str, Any]:
        started = time.monotonic()
        row: dict[str, Any] = {
            "question_id": conv.question_id,
            "axis": conv.axis,
            "sample": sample,
            "pass_criteria": conv.pass_criteria,
            "target_question": conv.target_question,
            "turns": len(conv.conversation),
            "schedule": self.settings.rounds,
            "response": None,
            "rounds": [],
            "ttc": None,
            "ttc_approximate": False,
            "error": None,
            "verdict": None,
            "judge_reasoning": None,
            "judge_error": None,
            "judge_attempts": 0,
            "passed": False,
        }
        try:
            message = await self.respond(conv, sample)
        except RoundFailedError as exc:
            if not _is_permanent(exc):
                raise Unfinished(f"response failed: {exc}"[:500]) from exc
            row["error"] = f"response failed: {exc}"[:4000]
            row["elapsed_s"] = round(time.monotonic() - started, 3)
            return row
        except Exception as exc:  # noqa: BLE001 - an unknown failure must not be written down as final
            raise Unfinished(f"response failed: {type(exc).__name__}: {exc}"[:500]) from exc

        pacore = message.response_metadata.get("pacore", {})
        row["response"] = str(message.content)
        row["rounds"] = _rounds_for_row(pacore)
        row["ttc"] = pacore.get("ttc")
        row["ttc_approximate"] = bool(pacore.get("ttc_approximate"))
        row["failed_trajectories"] = len(pacore.get("failures", []))

        verdict, judge_error = await self._judge(row["response"], conv.target_question)
        if verdict is None:
            row["judge_error"] = judge_error
        else:
            row["verdict"] = verdict.verdict
            row["judge_reasoning"] = verdict.reasoning
            row["judge_error"] = verdict.error
            row["judge_attempts"] = verdict.attempts
            row["judge_format"] = verdict.response_format
            if verdict.error:
                row["judge_raw"] = verdict.raw[:2000]
        row["passed"] = row["verdict"] is not None and row["verdict"] == conv.pass_criteria
        row["elapsed_s"] = round(time.monotonic() - started, 3)
        return row
