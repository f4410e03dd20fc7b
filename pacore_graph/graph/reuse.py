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

The model a trajectory is drawn from is read in one place, :func:`trajectory_model`: the run's one model, or in a
panel run its slot's (named by its panel name and the name its requests send, with that member's own config).
Sampling is what the request carries besides the messages: PaCoReConfig's sampling as the model's calls fill it in,
what the model and its bindings set (tools included), never the transport (streaming).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, convert_to_openai_messages

from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.panel import PanelExplorer
from pacore_graph.graph.reuse_pool import RoundPlan
from pacore_graph.models.calls import round_kwargs
from pacore_graph.models.unwrap import WrappedChatModel
from pacore_graph.records import TrajectoryData

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


def trajectory_model(
    explorer: Explorer, config: PaCoReConfig, round_index: int, index: int
) -> tuple[str | None, Explorer, PaCoReConfig]:
    """The model trajectory ``index`` of round ``round_index`` is drawn from: the one place reuse reads it. Its panel
    name (None outside a panel), the explorer that calls it (its name as requests send it and its sampling are read
    off that) and the config its requests are made under (a panel member's own window and reply cap)."""
    if isinstance(explorer, PanelExplorer):
        return explorer.slot_explorer(round_index, index)
    return None, explorer, config


class RequestKeys:
    """The request digest of each trajectory of a graph: its model's, its messages', its sampling's."""

    def __init__(self, explorer: Explorer, config: PaCoReConfig):
        self.explorer = explorer
        self.config = config
        self._models: dict[int, tuple[Explorer, tuple[str, str] | None]] = {}  # id -> (model, its digests)

    def slot_config(self, round_index: int, index: int) -> PaCoReConfig:
        """The config trajectory ``index`` of round ``round_index`` builds its messages under."""
        return trajectory_model(self.explorer, self.config, round_index, index)[2]

    def key(self, round_index: int, index: int, messages_digest: str) -> str | None:
        """None when the trajectory's model is no chat model (nothing says what its requests are)."""
        panel_name, model, config = trajectory_model(self.explorer, self.config, round_index, index)
        known = self._models.get(id(model))
        if known is None:  # the model is kept beside its digests, so its id stays its own
            name, sampling = model_identity(model), sampling_of(model, config)
            if name is not None and panel_name is not None:
                name = f"{panel_name}={name}"  # two members may serve models of one name from different servers
            digests = None if name is None or sampling is None else (digest(name), digest(sampling))
            known = self._models[id(model)] = (model, digests)
        digests = known[1]
        return None if digests is None else f"{digests[0]}.{messages_digest}.{digests[1]}"


def round_plan(keys: RequestKeys, run: RunState, current: Round, template: str) -> RoundPlan:
    """What round ``current`` sends (worked out once per round, for all its trajectories at once, so which record
    goes where does not depend on which trajectory starts first)."""
    if current.plan is not None:
        return current.plan
    previous = run.rounds.get(current.index - 1)
    digests: dict[int, str] = {}  # id of a message list (one per distinct references) -> its digest
    requests: list[str | None] = []
    for index in range(current.k):
        own = keys.slot_config(current.index, index)  # a panel member's window fits its own messages
        seen = current.references(index, previous, own)
        messages = current.messages(seen.texts, run.messages, own, template)
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
