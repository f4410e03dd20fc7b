"""Run MultiChallenge: respond through PaCoRe, judge, append one row per (conversation, sample).

It runs on the batch engine (``pacore_graph.RunFolder``): one problem per (conversation, sample), keyed
``QUESTION_ID#SAMPLE``. Finished rows are in ``results.jsonl`` and are never redone. A row in flight when
the run was killed resumes from its checkpoint: finished trajectories of the interrupted round, and a
finished but unjudged response, are not computed again.

Failures are sorted into three kinds, so that nothing wrong ever counts as a pass and nothing
transient is written down as final:
- a response the server refuses for good (HTTP 4xx such as a context overflow, or no trajectory with a
  conclusion) is recorded as an error row (not passed);
- a judge reply that stays unreadable, or a judge request refused for good, is recorded as a judge error;
- anything transient (connection lost, 5xx after the operator's retries) leaves the row unfinished: the
  next run into the same folder does it again, from its checkpoint (a failed round's trajectories run again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel

from pacore_benchmarks.multichallenge.data import Conversation
from pacore_benchmarks.multichallenge.judge import Judge, JudgeOutcome
from pacore_benchmarks.multichallenge.settings import RunSettings
from pacore_graph import PaCoReConfig, PaCoReResult, Problem, RoundFailedError, RunFolder
from pacore_graph.extend import ModelRequestError, ProblemOutcome, RetryPolicy, with_retries

# A response error caused by the request itself: retrying the same request cannot help.
_PERMANENT_STATUSES = frozenset({400, 413, 422})
_JUDGE_CALL_ATTEMPTS = 4


def row_key(row: dict[str, Any]) -> str:
    return problem_id(row["question_id"], int(row["sample"]))


def problem_id(question_id: str, sample: int) -> str:
    return f"{question_id}#{sample}"


def run_folder(settings: RunSettings, progress: Any = True) -> RunFolder:
    """The run's output folder: its fingerprint is what defines the results (see ``RunSettings.identity``)."""
    return RunFolder(
        settings.output,
        fingerprint=settings.identity(),
        settings=settings.model_dump(),
        key=row_key,
        progress=progress,
        escalation=False,  # its rows are judged conversations: another schedule is another folder
    )


class Unfinished(Exception):
    """A row could not be finished for a transient reason; a rerun will try it again (from its checkpoint)."""


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
        max_concurrency=settings.max_concurrency,
    )


def _is_permanent(error: RoundFailedError) -> bool:
    """Some trajectory was refused for its request (400/413/422), cut off, or gave an empty conclusion."""
    return any(t.error_status in _PERMANENT_STATUSES if t.failed else not t.usable for t in error.round.trajectories)


def _rounds_for_row(result: PaCoReResult) -> list[dict[str, Any]]:
    """Per round: every trajectory's record (conclusion, counts, failure; never its reasoning) and the order in
    which its conclusions went on as references."""
    return [record.model_dump() for record in result.rounds]


class MultiChallengeRunner:
    """Runs pending (conversation, sample) pairs in ``folder``, ``settings.workers`` at a time."""

    def __init__(
        self,
        settings: RunSettings,
        *,
        responder: BaseChatModel,
        judge_model: BaseChatModel,
        folder: RunFolder,
        context_window: int | None = None,
        judge_formats: tuple[dict[str, Any] | None, ...] | None = None,
        config: PaCoReConfig | None = None,
    ):
        self.settings = settings
        self.folder = folder
        self.responder = responder
        self.config = config or pacore_config(settings, context_window)
        self.judge = Judge(
            judge_model,
            prompt=settings.judge_prompt,
            attempts=settings.judge_attempts,
            max_tokens=settings.judge_max_tokens,
            formats=judge_formats,
        )

    def problems(self, conversations: list[Conversation]) -> list[Problem]:
        return [
            Problem(problem_id(conv.question_id, sample), conv.messages(), (conv, sample))
            for conv in conversations
            for sample in range(self.settings.samples)
        ]

    def pending(self, conversations: list[Conversation]) -> list[Problem]:
        done = self.folder.results.done()
        return [problem for problem in self.problems(conversations) if problem.id not in done]

    async def arun(
        self,
        conversations: list[Conversation],
        *,
        on_done: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> RunOutcome:
        async def row(outcome: ProblemOutcome) -> dict[str, Any] | None:
            made = None
            try:
                made = await self.row(outcome)
            finally:
                if on_done is not None:
                    on_done(made)
            return made

        summary = await self.folder.run(
            self.responder,
            self.config,
            self.problems(conversations),
            row,
            concurrency=self.settings.workers,
            label="conversations",
        )
        return RunOutcome(
            written=summary.written, unfinished=[f"{key}: {reason}" for key, reason in summary.failed.items()]
        )

    # ---------------------------------------------------------------- one row

    async def _judge(self, response: str, question: str) -> tuple[JudgeOutcome | None, str | None]:
        """The verdict, or the error of a judge request refused for good; Unfinished when the judge is away."""
        policy = RetryPolicy(max_attempts=_JUDGE_CALL_ATTEMPTS, initial_delay=2.0, jitter=0.0)
        try:
            verdict, _ = await with_retries(lambda: self.judge.ajudge(response, question), policy, None)
        except ModelRequestError as exc:
            if not exc.retryable:
                return None, f"judge request refused: {exc}"[:2000]
            raise Unfinished(f"judge call failed: {type(exc).__name__}: {exc}"[:500]) from exc
        except Exception as exc:  # noqa: BLE001 - an unknown failure must not be written down as final
            raise Unfinished(f"judge call failed: {type(exc).__name__}: {exc}"[:500]) from exc
        return verdict, None

    async def row(self, outcome: ProblemOutcome) -> dict[str, Any]:
        """The row of one (conversation, sample); raises Unfinished when it must be done again later."""
        started = time.monotonic()
        conv, sample = outcome.problem.payload
        row: dict[str, Any] = {
            "question_id": conv.question_id,
            "axis": conv.axis,
            "sample": sample,
            "pass_criteria": conv.pass_criteria,
            "target_question": conv.target_question,
            "turns": len(conv.conversation),
            "messages": [turn.model_dump() for turn in conv.conversation],
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
        error = outcome.error
        if isinstance(error, RoundFailedError) and _is_permanent(error):
            row["error"] = f"response failed: {error}"[:4000]
            row["elapsed_s"] = round(time.monotonic() - started, 3)
            return row
        if outcome.result is None:  # transient, or unknown: never written down as final
            raise Unfinished(f"response failed: {type(error).__name__}: {error}"[:500])

        result = outcome.result
        row["response"] = result.answer
        row["rounds"] = _rounds_for_row(result)
        row["ttc"] = result.ttc
        row["ttc_approximate"] = result.ttc_approximate
        row["failed_trajectories"] = len(result.failures)

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
