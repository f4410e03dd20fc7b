"""Records of a run: what one trajectory produced, what a round passed on, the final result.

Graph state (and so every checkpoint) holds plain JSON data: the ``TrajectoryData`` / ``RoundData``
dicts below. The public result types (``TrajectoryRecord``, ``RoundRecord``, ``PaCoReResult``) are
pydantic models built from that data; they never enter a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from langchain_core.messages import AIMessage
from pydantic import BaseModel, ConfigDict, Field

from pacore_graph.synthesis.compaction import reference_text


class ToolCallData(TypedDict):
    name: str
    args: dict[str, Any]
    id: str | None


class TrajectoryData(TypedDict, total=False):
    """One trajectory as graph state keeps it: its conclusion and counts, never its reasoning."""

    round_index: int
    index: int
    conclusion: str
    tool_calls: list[ToolCallData]
    content_length: int
    prompt_tokens: int
    completion_tokens: int
    tokens_approximate: bool
    finish_reason: str | None
    model_name: str | None
    model: str | None  # a panel run: the slot's model, by its panel name
    seconds: float  # a panel run: the trajectory's wall time, retries included
    message_id: str | None
    truncated: bool
    error: str | None
    error_type: str | None
    error_status: int | None
    error_transient: bool
    attempts: int
    # coordination options (pacore_graph.coordination); absent when every option is off
    answer: str | None
    cut: str | None
    reference_indices: list[int]
    reference_counts: list[int]
    # escalation (pacore_graph.graph.reuse)
    request: str
    reused: bool


class RoundData(TypedDict):
    """One round as graph state keeps it; ``reference_order`` lists trajectory indices in template order."""

    round_index: int
    k: int
    reference_order: list[int]
    trajectories: list[TrajectoryData]


class RoundSummary(TypedDict):
    """A finished round as graph state keeps it: its records are ``trajectories[start:end]`` of the run's
    state (each conclusion is stored once, by its trajectory), in task order."""

    round_index: int
    k: int
    reference_order: list[int]
    start: int
    end: int


def round_data_of(summary: RoundSummary, trajectories: Sequence[TrajectoryData]) -> RoundData:
    """The finished round ``summary`` describes, with its records from the run's ``trajectories``."""
    records = sorted(trajectories[summary["start"] : summary["end"]], key=lambda record: record["index"])
    return RoundData(
        round_index=summary["round_index"],
        k=summary["k"],
        reference_order=summary["reference_order"],
        trajectories=records,
    )


class OutcomeData(TypedDict, total=False):
    """How the answer was chosen, when a coordination option chose it (see :class:`Outcome`)."""

    selector: str
    stop: str | None
    round_index: int
    index: int
    votes: list[list[Any]]  # [answer, count] pairs (read as Outcome.votes)
    verifier_choice: int | None


class Trajectory(BaseModel):
    """The raw outcome of one trajectory (a model call or a whole agent episode), before compaction."""

    content: str = ""
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="name, args and id of each call")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    model_name: str | None = None
    message_id: str | None = Field(None, description="id of the model's message (the answer reuses it)")
    extra: dict[str, Any] = Field(default_factory=dict, description="anything for the trace")


class TrajectoryRecord(BaseModel):
    """What a run keeps of one trajectory: its conclusion and counts, never its reasoning."""

    model_config = ConfigDict(frozen=True)

    round_index: int
    index: int
    conclusion: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    content_length: int = Field(0, description="length of the raw content; orders references like the reference")
    prompt_tokens: int = 0
    completion_tokens: int = Field(0, description="reasoning included: this is what TTC sums")
    tokens_approximate: bool = False
    finish_reason: str | None = None
    model_name: str | None = None
    model: str | None = Field(None, description="a panel run: the model its slot was given, by its panel name")
    seconds: float | None = Field(None, description="a panel run: its wall time, retries included")
    message_id: str | None = None
    truncated: bool = Field(False, description="cut off by the length limit")
    error: str | None = Field(None, description="why the trajectory failed after retries")
    error_type: str | None = Field(None, description="class name of the last error")
    error_status: int | None = Field(None, description="HTTP status of the last error, when it had one")
    error_transient: bool = Field(False, description="the last error was of a kind worth trying again later")
    attempts: int = 1
    answer: str | None = Field(None, description="extracted answer (with an answer_extractor)")
    cut: str | None = Field(None, description="why the round cancelled it: early_stop, budget_tokens or deadline")
    reference_indices: list[int] | None = Field(
        None, description="previous round's trajectories it saw, template order (subset or dedup on)"
    )
    reference_counts: list[int] | None = Field(None, description="references each shown text stands for (dedup)")
    request: str | None = Field(None, description="digest of what was sent: model, messages, sampling (escalation)")
    reused: bool = Field(False, description="taken from an earlier result instead of sent (escalation)")

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def has_conclusion(self) -> bool:
        return is_usable(None, self.conclusion, self.tool_calls)

    @property
    def usable(self) -> bool:
        """Whether it may be passed on as a reference: failed and empty ones never are."""
        return is_usable(self.error, self.conclusion, self.tool_calls)

    @property
    def reference(self) -> str:
        """Its text in the next round's template: the conclusion plus its tool calls, rendered."""
        return reference_text(self.conclusion, self.tool_calls)

    def __repr__(self) -> str:
        """One line: where it ran, what it cost, and its conclusion (shortened) or why it has none."""
        fields = [f"round_index={self.round_index}", f"index={self.index}"]
        if self.failed:
            fields += [f"error={shorten(self.error or '')!r}", f"attempts={self.attempts}"]
        else:
            fields += [f"completion_tokens={self.completion_tokens}", f"conclusion={shorten(self.conclusion, 40)!r}"]
            fields += [f"tool_calls={len(self.tool_calls)}"] if self.tool_calls else []
        fields += ["truncated=True"] if self.truncated else []
        fields += [f"cut={self.cut!r}"] if self.cut else []
        return f"TrajectoryRecord({', '.join(fields)})"

    __str__ = __repr__


def is_usable(error: str | None, conclusion: str, tool_calls: Sequence[object] | None) -> bool:
    """The rule: a trajectory that did not fail and left a conclusion or a tool call may be passed on."""
    return error is None and bool(conclusion.strip() or tool_calls)


def usable(record: TrajectoryData) -> bool:
    """``TrajectoryRecord.usable`` on state data, without building the model (the graph's hot path)."""
    return is_usable(record.get("error"), record.get("conclusion", ""), record.get("tool_calls"))


class RoundRecord(BaseModel):
    """One round: its trajectories and the order in which the usable ones became references."""

    model_config = ConfigDict(frozen=True)

    round_index: int
    k: int
    reference_order: list[int] = Field(default_factory=list, description="trajectory indices, template order")
    trajectories: list[TrajectoryRecord] = Field(default_factory=list)

    @property
    def references(self) -> list[str]:
        """The texts the round passed on, in template order (before any context-window capping)."""
        by_index = {t.index: t for t in self.trajectories}
        return [by_index[index].reference for index in self.reference_order]

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.trajectories)

    @property
    def failures(self) -> list[TrajectoryRecord]:
        return [t for t in self.trajectories if t.failed]

    def counts(self) -> dict[str, Any]:
        """The round in numbers, what an answer message carries of it by default: K and tokens, plus how many
        trajectories failed, were truncated or were cut, each when there were some (a thread keeps it)."""
        trajectories = self.trajectories
        counts: dict[str, Any] = {
            "round_index": self.round_index,
            "k": self.k,
            "prompt_tokens": sum(t.prompt_tokens for t in trajectories),
            "completion_tokens": self.completion_tokens,
        }
        for name, number in (
            ("failed", sum(1 for t in trajectories if t.failed)),
            ("truncated", sum(1 for t in trajectories if t.truncated)),
            ("cut", sum(1 for t in trajectories if t.cut)),
            ("reused", sum(1 for t in trajectories if t.reused)),
        ):
            if number:
                counts[name] = number
        return counts

    @property
    def transient(self) -> bool:
        """Some trajectory failed for a reason that may pass (a 5xx, a dropped connection, a timeout)."""
        return any(t.error_transient for t in self.trajectories)

    def __repr__(self) -> str:
        """One line: its counts (``.trajectories`` lists each record)."""
        counts = self.counts()
        counts["usable"] = sum(1 for t in self.trajectories if t.usable)
        return f"RoundRecord({', '.join(f'{name}={value}' for name, value in counts.items())})"

    __str__ = __repr__


class Outcome(BaseModel):
    """How the answer was chosen. The paper: the final round's one synthesis (``selector="synthesis"``)."""

    model_config = ConfigDict(frozen=True)

    selector: str = Field(
        "synthesis", description="synthesis | vote (over extracted answers) | verifier | first (first reference)"
    )
    stop: str | None = Field(None, description="why rounds were skipped: unanimous, budget_tokens or deadline")
    round_index: int | None = Field(None, description="round of the trajectory whose conclusion is the answer")
    index: int | None = Field(None, description="that trajectory's index")
    votes: list[tuple[str, int]] = Field(default_factory=list, description="(answer, votes) when it was a vote")
    verifier_choice: int | None = Field(None, description="candidate number the verifier named")


class ReuseReport(BaseModel):
    """What a run continued from an earlier result took from it (see :mod:`pacore_graph.graph.reuse`)."""

    model_config = ConfigDict(frozen=True)

    offered: int = Field(0, description="finished trajectories of the earlier result")
    reused: int = Field(0, description="of them, taken by this run instead of sent")
    prompt_tokens: int = Field(0, description="the reused trajectories' prompt tokens (spent before)")
    completion_tokens: int = Field(0, description="the reused trajectories' completion tokens (spent before)")
    note: str | None = Field(None, description="why nothing was reused, when nothing was")


class PaCoReResult(BaseModel):
    """The answer of a run plus everything needed to account for it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: str
    rounds: list[RoundRecord]
    message: AIMessage
    trajectories: list[Trajectory] | None = Field(None, description="full trajectories, when traced")
    outcome: Outcome = Field(default_factory=Outcome)
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="a panel run: per model its trajectories, requests, failures, tokens, seconds and agreement "
        "(pacore_graph.coordination.panel); empty for a one-model run",
    )
    reuse: ReuseReport | None = Field(None, description="what was taken from an earlier result (run with reuse=)")

    @property
    def ttc(self) -> int:
        """Effective test-time compute: completion tokens over every trajectory of every round."""
        return sum(r.completion_tokens for r in self.rounds)

    @property
    def ttc_approximate(self) -> bool:
        return any(t.tokens_approximate for r in self.rounds for t in r.trajectories)

    @property
    def failures(self) -> list[TrajectoryRecord]:
        return [t for r in self.rounds for t in r.failures]

    @property
    def cut(self) -> list[TrajectoryRecord]:
        """Trajectories a round cancelled (early stop, budget): their tokens before the cut are not counted."""
        return [t for r in self.rounds for t in r.trajectories if t.cut]

    def __repr__(self) -> str:
        """One line: the answer (shortened), the schedule run, TTC and failures (``.rounds`` has each round)."""
        schedule = [r.k for r in self.rounds]
        return (
            f"PaCoReResult(answer={shorten(self.answer, 40)!r}, rounds={schedule}, ttc={self.ttc}, "
            f"failures={len(self.failures)})"
        )

    def __str__(self) -> str:
        """What a person reads: the answer, then one line per round."""
        lines = [self.answer.strip() or "(empty answer)", ""]
        lines += [f"round {r.round_index + 1}: {round_line(r)}" for r in self.rounds]
        calls = sum(r.k for r in self.rounds)
        reused = sum(1 for r in self.rounds for t in r.trajectories if t.reused)
        sent = f" ({reused} reused from an earlier run, {calls - reused} sent)" if reused else ""
        lines.append(f"effective TTC: {self.ttc:,} completion tokens over {calls} calls{sent}")
        lines += [model_line(name, account) for name, account in self.models.items()]
        if self.reuse is not None and self.reuse.note:
            lines.append(f"reused nothing: {self.reuse.note}")
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """JSON-ready account (what ``--output`` writes): each conclusion appears once, in its round."""
        return {"answer": self.answer, **self.accounting()}

    def accounting(self, full: bool = True) -> dict[str, Any]:
        """TTC, rounds and failures: what the answer message's ``response_metadata["pacore"]`` carries. Unless
        ``full`` (every trajectory's record), each round's counts only, and the failures, cuts and outcome only
        when there are any (the paper's synthesis is the outcome otherwise)."""
        account = {
            "ttc": self.ttc,
            "ttc_approximate": self.ttc_approximate,
            "rounds": [r.model_dump() if full else r.counts() for r in self.rounds],
            "failures": [{"round_index": t.round_index, "index": t.index, "error": t.error} for t in self.failures],
            "outcome": self.outcome.model_dump(),
            "cut": [{"round_index": t.round_index, "index": t.index, "reason": t.cut} for t in self.cut],
        }
        if self.models:
            account["models"] = self.models
        reuse = self.reuse_account()
        if reuse is not None:
            account["reuse"] = reuse
        if not full:
            account = {key: value for key, value in account.items() if value or key in ("ttc", "rounds")}
            if self.outcome == Outcome():
                del account["outcome"]
        return account

    def reuse_account(self) -> dict[str, Any] | None:
        """What was reused (counted from the records, so a result read back from a checkpoint has it too), with
        why nothing was when the run was given an earlier result; None when neither."""
        reused = [t for r in self.rounds for t in r.trajectories if t.reused]
        if self.reuse is None and not reused:
            return None
        account: dict[str, Any] = {"offered": None, "note": None}
        if self.reuse is not None:
            account = self.reuse.model_dump()
        account["reused"] = len(reused)
        account["prompt_tokens"] = sum(t.prompt_tokens for t in reused)
        account["completion_tokens"] = sum(t.completion_tokens for t in reused)
        return account


def shorten(text: str, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def round_line(round: RoundRecord) -> str:
    """A round in words: K, tokens, and what went wrong when something did."""
    counts = round.counts()
    parts = [f"K={round.k}", f"{counts['completion_tokens']:,} tokens"]
    parts += [f"{counts[name]} {name}" for name in ("failed", "truncated", "cut", "reused") if name in counts]
    return ", ".join(parts)


def model_line(name: str, account: dict[str, Any]) -> str:
    """A panel model's account in words (``pacore solve``, ``pacore show``); "agree": how many of its usable
    trajectories before the last round give the run's answer."""
    reused = f", {account['reused']} reused" if account.get("reused") else ""  # escalation: bought before
    line = (
        f"{name}: {account['trajectories']} trajectories ({account['requests']} requests{reused}), "
        f"{account['prompt_tokens']:,} prompt / {account['completion_tokens']:,} completion tokens, "
        f"{account['seconds']:.1f} s"
    )
    if account["failed"]:
        line += f", {account['failed']} failed"
    if account["usable"]:
        line += f", {account['agree']}/{account['usable']} agree"
    return line
