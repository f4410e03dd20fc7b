"""The PaCoRe graph's state and its Send argument: plain JSON data, each conclusion stored once.

Every trajectory's record (conclusion and counts, never reasoning) is written by its task into
``trajectories``, a LangGraph ``DeltaChannel`` (a checkpoint keeps the writes, not the grown list again); a
finished round adds a small summary (its K, its slice of ``trajectories``, its reference order) to
``rounds``. A Send carries indices only: a trajectory of round r+1 reads round r's conclusions from the
run's in-process state, which the collector fills, or the runner from the checkpoint on a resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import AIMessage
from langgraph.channels import DeltaChannel

from pacore_graph.records import OutcomeData, RoundSummary, TrajectoryData


def _extend(current: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    """The ``DeltaChannel`` reducer: the writes' items appended in order (batching-invariant)."""
    return [*current, *(item for write in writes for item in write)]


class PaCoReState(TypedDict, total=False):
    round_index: int
    round_start: int  # where the current round's records begin in `trajectories`
    trajectories: Annotated[list[TrajectoryData], DeltaChannel(_extend)]  # every record of the run, stored once
    rounds: Annotated[list[RoundSummary], DeltaChannel(_extend)]  # one per finished round
    answer: AIMessage | None
    outcome: OutcomeData | None  # set when a coordination option chose the answer


class TrajectoryTask(TypedDict):
    """The Send argument: indices, never texts (the references come from the run's state)."""

    round_index: int
    index: int
    spent: NotRequired[int]  # completion tokens spent before this round (only with a token budget)
