"""Escalation: a run continued at a larger schedule reuses the trajectories bought before, where they are valid
draws of the new schedule.

A trajectory is a draw from one request: a model, the messages it was sent, the sampling it was sent with.
Every record carries a digest of that request (``request``: three short digests, model, messages and sampling,
joined by dots). A new run given an earlier result (:class:`ReusePool`) works out, per round, the request each
of its trajectories would send; a trajectory whose request is one the earlier result holds a record of takes
that record instead of sending (``reused`` on its record), each record at most once. So low ``[4]`` then medium
``[16]`` reuses the 4 first-round trajectories and sends 12 + 1 (the synthesis sees 16 references: a new
request); ``[32, 4]`` then ``[32, 8]`` reuses round 1 whole, then 4 of round 2 (same references in the same
order: the same messages), and sends 4 + 1.

The model a trajectory is drawn from is read in one place, :func:`trajectory_model`; a run has one model, so
today it is the explorer's. Sampling is what the request carries besides the messages: PaCoReConfig's sampling
as the model's calls fill it in, what the model and its bindings set (tools included), never the transport
(streaming).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, convert_to_openai_messages
from pydantic import ValidationError

from pacore_graph.config import PaCoReConfig
from pacore_graph.models.calls import round_kwargs
from pacore_graph.models.unwrap import WrappedChatModel
from pacore_graph.records import PaCoReResult, ReuseReport, RoundRecord, TrajectoryData, TrajectoryRecord

if TYPE_CHECKING:
    from pacore_graph.explorers.protocol import Explorer
    from pacore_graph.graph.run_state import Round, RunState

# Model fields that change what a chat model samples, when the model itself sets them.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "n",
    "reasoning_effort",
    "model_kwargs",
    "extra_body",
)
TRANSPORT_FIELDS = frozenset({"stream", "streaming", "sse"})  # how the reply travels, not what is drawn
_DIGEST_CHARS = 16


def digest(value: Any) -> str:
    """A short digest of ``value`` as JSON (keys sorted; what JSON cannot hold, by its repr)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]


def model_identity(explorer: Explorer) -> str | None:
    """The name a chat explorer's model goes by in its requests; None for an explorer that is no chat model (an
    agent episode sends many requests: nothing says which would be the same)."""
    found = getattr(explorer, "found", None)
    if not isinstance(found, WrappedChatModel):
        return None
    for attribute in ("model_name", "model"):
        name = getattr(found.model, attribute, None)
        if isinstance(name, str) and name:
            return name
    return type(found.model).__name__


def trajectory_model(explorer: Explorer, round_index: int, index: int) -> str | None:
    """The model trajectory ``index`` of round ``round_index`` is drawn from, as reuse compares it. The one place
    reuse reads a trajectory's model: a run has one model, the explorer's (a panel would name each slot's)."""
    return model_identity(explorer)


def sampling_of(explorer: Explorer, config: PaCoReConfig) -> dict[str, Any] | None:
    """What a chat explorer's requests carry besides the model and the messages, transport left out."""
    found = getattr(explorer, "found", None)
    if not isinstance(found, WrappedChatModel):
        return None
    model = found.model
    own = {name: getattr(model, name) for name in SAMPLING_FIELDS if getattr(model, name, None) not in (None, {})}
    early, _ = round_kwargs(found, config)
    sent = {**own, **found.bound, **early}
    return {name: value for name, value in sent.items() if name not in TRANSPORT_FIELDS}


class RequestKeys:
    """The request digest of each trajectory of a graph: its model's, its messages', its sampling's."""

    def __init__(self, explorer: Explorer, config: PaCoReConfig):
        self.explorer = explorer
        sampling = sampling_of(explorer, config)
        self.sampling = None if sampling is None else digest(sampling)
        self._models: dict[str | None, str] = {}

    def key(self, round_index: int, index: int, messages_digest: str) -> str | None:
        if self.sampling is None:
            return None
        model = trajectory_model(self.explorer, round_index, index)
        if model is None:
            return None
        model_digest = self._models.get(model)
        if model_digest is None:
            model_digest = self._models[model] = digest(model)
        return f"{model_digest}.{messages_digest}.{self.sampling}"


class RoundPlan:
    """A round's requests, one per trajectory, and the earlier records it reuses (trajectory index -> record)."""

    __slots__ = ("requests", "reused")

    def __init__(self, requests: list[str | None], reused: dict[int, TrajectoryData]):
        self.requests = requests
        self.reused = reused


def round_plan(keys: RequestKeys, run: RunState, current: Round, template: str, config: PaCoReConfig) -> RoundPlan:
    """What round ``current`` sends (worked out once per round, for all its trajectories at once, so which record
    goes where does not depend on which trajectory starts first)."""
    if current.plan is not None:
        return current.plan
    previous = run.rounds.get(current.index - 1)
    digests: dict[int, str] = {}  # id of a message list (one per distinct references) -> its digest
    requests: list[str | None] = []
    for index in range(current.k):
        seen = current.references(index, previous, config)
        messages = current.messages(seen.texts, run.messages, config, template)
        found = digests.get(id(messages))
        if found is None:
            found = digests[id(messages)] = messages_digest(messages)
        requests.append(keys.key(current.index, index, found))
    pool = run.reuse
    reused = pool.assign(current.index, requests) if pool is not None else {}
    current.plan = plan = RoundPlan(requests, reused)
    return plan


def messages_digest(messages: Sequence[BaseMessage]) -> str:
    return digest(convert_to_openai_messages(list(messages)))


def reused_record(record: TrajectoryData, round_index: int, index: int, request: str | None) -> TrajectoryData:
    """An earlier record in its new place, marked reused (what it saw is recorded again by the new run)."""
    placed = TrajectoryData(**record)
    placed.pop("reference_indices", None)
    placed.pop("reference_counts", None)
    placed["round_index"], placed["index"], placed["reused"] = round_index, index, True
    if request is not None:
        placed["request"] = request
    return placed


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


def escalates(earlier: Sequence[int], later: Sequence[int]) -> bool:
    """Whether schedule ``later`` continues ``earlier``: as many rounds or more, each at least as wide."""
    return len(later) >= len(earlier) and all(new >= old for old, new in zip(earlier, later, strict=False))


def check_escalation(earlier: Sequence[int], later: Sequence[int], what: str) -> None:
    if not escalates(earlier, later):
        raise ValueError(
            f"{what} ran rounds {list(earlier)}; rounds {list(later)} is smaller: a run continues only at a "
            "schedule as long or longer with every round at least as wide"
        )
