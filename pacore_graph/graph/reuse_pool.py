"""What a run continued from an earlier result may take from it: :class:`ReusePool`, the earlier trajectories with
their request digests, each given to at most one trajectory of the new run (see :mod:`pacore_graph.graph.reuse`);
and the check, before anything is sent, that the earlier result is one and ran no larger schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.escalation import check_escalation
from pacore_graph.records import PaCoReResult, ReuseReport, RoundRecord, TrajectoryData, TrajectoryRecord


class RoundPlan:
    """A round's requests, one per trajectory, and the earlier records it reuses (trajectory index -> record)."""

    __slots__ = ("requests", "reused")

    def __init__(self, requests: list[str | None], reused: dict[int, TrajectoryData]):
        self.requests = requests
        self.reused = reused


Reusable = PaCoReResult | Mapping[str, Any] | Sequence[RoundRecord]
"""What a run can continue from: a result, a results row or ``summary()`` (``pacore solve --output``'s row), or
the rounds of one."""


class ReusePool:
    """The trajectories of an earlier result a new run may take instead of sending, each at most once."""

    def __init__(self, rounds: Sequence[RoundRecord]):
        self.rounds = list(rounds)
        self.entries: list[TrajectoryRecord] = [
            t for r in self.rounds for t in r.trajectories if t.request and not t.failed and not t.cut
        ]
        self._plans: dict[int, dict[int, TrajectoryData]] = {}
        self._taken: set[int] = set()
        self._asked: set[str] = set()

    @property
    def offered(self) -> int:
        return len(self.entries)

    def assign(self, round_index: int, requests: Sequence[str | None]) -> dict[int, TrajectoryData]:
        """The records round ``round_index`` takes, by trajectory index: one whose request is the trajectory's,
        first the one that held the same place, then the others in order. A round asked again (resumed, or run
        again) gets the same answer."""
        planned = self._plans.get(round_index)
        if planned is not None:
            return planned
        free: dict[str, list[int]] = {}
        for position, entry in enumerate(self.entries):
            if position not in self._taken and entry.request is not None:
                free.setdefault(entry.request, []).append(position)
        chosen: dict[int, int] = {}
        for index, request in enumerate(requests):  # first: a record of the same place
            if request is None:
                continue
            self._asked.add(request)
            for position in free.get(request, ()):
                entry = self.entries[position]
                if (entry.round_index, entry.index) == (round_index, index):
                    chosen[index] = position
                    free[request].remove(position)
                    break
        for index, request in enumerate(requests):  # then any other with the same request
            if request is not None and index not in chosen and free.get(request):
                chosen[index] = free[request].pop(0)
        self._taken.update(chosen.values())
        planned = {index: record_data(self.entries[position]) for index, position in chosen.items()}
        self._plans[round_index] = planned
        return planned

    def note(self, reused: int) -> str | None:
        """Why nothing was reused (None when something was)."""
        if reused:
            return None
        if not self.offered:
            return (
                "the earlier result has no trajectory to reuse (none finished, or its records carry no request "
                "digest: an older version made them)"
            )
        asked = [request.split(".") for request in self._asked]
        held = [entry.request.split(".") for entry in self.entries if entry.request]
        for position, what in ((0, "the model"), (2, "the sampling (temperature, top_p, max_tokens, request fields)")):
            if not {parts[position] for parts in held} & {parts[position] for parts in asked}:
                return f"{what} differs from the earlier run's: its trajectories are not draws of this one"
        if not {parts[1] for parts in held} & {parts[1] for parts in asked}:
            return "the messages differ from the earlier run's (another problem or conversation)"
        return "no earlier trajectory was sent with a request this schedule sends"

    def report(self, result: PaCoReResult) -> ReuseReport:
        reused = [t for r in result.rounds for t in r.trajectories if t.reused]
        return ReuseReport(
            offered=self.offered,
            reused=len(reused),
            prompt_tokens=sum(t.prompt_tokens for t in reused),
            completion_tokens=sum(t.completion_tokens for t in reused),
            note=self.note(len(reused)),
        )


def record_data(record: TrajectoryRecord) -> TrajectoryData:
    data: TrajectoryData = record.model_dump(exclude_none=True)  # type: ignore[assignment]
    return data


def reuse_pool(earlier: Reusable, config: PaCoReConfig) -> ReusePool:
    """The pool of ``earlier`` (a result, a results row, rounds) for a run under ``config``: refused in one line,
    before anything is sent, when it is no PaCoRe result or ran a larger schedule than ``config``."""
    rounds = rounds_of(earlier)
    check_escalation(schedule_of(rounds), config.rounds, "the earlier result")
    return ReusePool(rounds)


def rounds_of(earlier: Reusable) -> list[RoundRecord]:
    if isinstance(earlier, PaCoReResult):
        return list(earlier.rounds)
    if isinstance(earlier, Mapping):
        given = earlier.get("rounds")
        if not isinstance(given, list):
            keys = ", ".join(sorted(map(str, earlier))[:6]) or "none"
            raise ValueError(f"reuse: not a PaCoRe result (no 'rounds' list; its keys: {keys})")
        try:
            return [RoundRecord.model_validate(data) for data in given]
        except ValidationError as exc:
            raise ValueError(f"reuse: not a PaCoRe result (its rounds do not read: {first_error(exc)})") from None
    value: object = earlier  # a caller's value, whatever the annotation says
    if isinstance(value, (list, tuple)) and all(isinstance(data, RoundRecord) for data in value):
        return list(value)
    raise TypeError(
        f"reuse takes a PaCoReResult, a results row (a dict with 'rounds') or a list of RoundRecord, not "
        f"{type(earlier).__name__}"
    )


def first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc']))}: {error['msg']}"


def schedule_of(rounds: Sequence[RoundRecord]) -> list[int]:
    """The rounds before the final one an earlier run ran (a run ended early lacks its final round of 1)."""
    ks = [r.k for r in rounds]
    return ks[:-1] if ks and ks[-1] == 1 else ks
