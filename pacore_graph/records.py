"""Typed records of a run: what one trajectory produced, what a round passed on, the final result."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from pydantic import BaseModel, ConfigDict, Field


class Trajectory(BaseModel):
    """The raw outcome of one trajectory (a model call or a whole agent episode), before compaction."""

    content: str = ""
    reasoning: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="anything for the trace")


class TrajectoryRecord(BaseModel):
    """What the graph keeps of one trajectory: its conclusion and counts, never its reasoning."""

    model_config = ConfigDict(frozen=True)

    round_index: int
    index: int
    conclusion: str = ""
    content_length: int = Field(0, description="length of the raw content; orders references like the reference")
    prompt_tokens: int = 0
    completion_tokens: int = Field(0, description="reasoning included: this is what TTC sums")
    tokens_approximate: bool = False
    finish_reason: str | None = None
    truncated: bool = Field(False, description="cut off by the length limit")
    error: str | None = Field(None, description="why the trajectory failed after retries")
    attempts: int = 1

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def has_conclusion(self) -> bool:
        return bool(self.conclusion.strip())

    @property
    def usable(self) -> bool:
        """Whether it may be passed on as a reference: failed and empty ones never are."""
        return not self.failed and self.has_conclusion


class RoundRecord(BaseModel):
    """One round: its trajectories and the references it passed on (in template order)."""

    model_config = ConfigDict(frozen=True)

    round_index: int
    k: int
    references: list[str] = Field(default_factory=list)
    trajectories: list[TrajectoryRecord] = Field(default_factory=list)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.trajectories)

    @property
    def failures(self) -> list[TrajectoryRecord]:
        return [t for t in self.trajectories if t.failed]


class PaCoReResult(BaseModel):
    """The answer of a run plus everything needed to account for it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: str
    rounds: list[RoundRecord]
    message: AIMessage
    trajectories: list[Trajectory] | None = Field(None, description="full trajectories, when traced")

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

    def summary(self) -> dict[str, Any]:
        """JSON-ready account: what `--output` writes and the answer message's metadata carries."""
        return {
            "answer": self.answer,
            "ttc": self.ttc,
            "ttc_approximate": self.ttc_approximate,
            "rounds": [r.model_dump() for r in self.rounds],
            "failures": [t.model_dump() for t in self.failures],
        }
