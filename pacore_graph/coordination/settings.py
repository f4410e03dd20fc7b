"""The coordination options of :class:`~pacore_graph.config.PaCoReConfig`, grouped. Every one is off by default:
with all of them off a run sends exactly the paper pipeline's requests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Budget(BaseModel):
    """Limits of one run (one problem). When one runs out, the trajectories in flight are cancelled (their
    HTTP requests closed, so the server stops generating), the round is collected with what finished and no
    further round starts: the answer is chosen from what there is (:mod:`pacore_graph.coordination.ending`).

    A run spends at most ``tokens`` plus what the trajectories in flight when it ran out had generated.
    Tokens count as trajectories finish (servers report usage at the end of a request).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: int | None = Field(None, ge=1, description="completion tokens over every round (reasoning included)")
    seconds: float | None = Field(
        None, gt=0, description="wall-clock deadline from the start of the run; a resumed run starts its clock again"
    )

    @property
    def active(self) -> bool:
        return self.tokens is not None or self.seconds is not None


class EarlyStop(BaseModel):
    """Stop a round once its answers agree (needs ``answer_extractor``): the rest of the round is cancelled.

    Answers count as the same when their :func:`~pacore_graph.coordination.answers.answer_key` is equal.
    The rules look at the trajectories of the round that finished with a conclusion, in finishing order.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agree: int | None = Field(None, ge=2, description="stop once this many finished trajectories give one answer")
    lead: int | None = Field(
        None,
        ge=1,
        description="stop once the leading answer is ahead of the runner-up by this many (a sequential "
        "test: it waits longer when the round is split)",
    )
    unbeatable: bool = Field(
        False,
        description="stop once the leading answer cannot be caught: its count exceeds the runner-up's plus the "
        "trajectories still running (the round's vote can no longer change)",
    )
    skip_unanimous: bool = Field(
        False,
        description="after a round whose conclusions all give one answer, run no further round: the first "
        "such conclusion (template order) is the answer",
    )

    @property
    def active(self) -> bool:
        return self.cancels or self.skip_unanimous

    @property
    def cancels(self) -> bool:
        """Whether a rule may cut a round short (``skip_unanimous`` acts between rounds only)."""
        return self.agree is not None or self.lead is not None or self.unbeatable
