"""PaCoRe over repair episodes: the operator's fan-out runs whole episodes instead of chat calls.

Round r runs K_r episodes, each in its own fresh sandbox, concurrently (the operator's Send fan-out
and its run-wide limiter; nothing here fans out). An episode is compacted to its patch (capped, with
a marker when cut) plus its note; the operator renders those as the Reference Responses of the next
round's user message, exactly as in the chat case. The final episode's patch is the prediction. An
episode that crashed or left no patch compacts to an empty conclusion, which the operator records
and never passes on.

An instance is a :class:`~pacore_graph.Problem` whose payload is its task row: every episode receives it
as ``EpisodeContext.payload`` and hands its record to ``EpisodeContext.record``, so the batch engine keeps
the records of an instance in flight across a kill. Episodes are isolated (``AgentExplorer(isolate=True)``):
an interrupted one starts over in a new sandbox instead of continuing a half-done episode in a sandbox that
lacks its edits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, Field

from pacore_agents.swe.prompts import PaCoReProtocol
from pacore_agents.swe.repair_episode import RepairEpisode
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_graph import AgentExplorer, EpisodeContext, PaCoReConfig, Problem, RoundFailedError
from pacore_graph.extend import ProblemOutcome

DEFAULT_PATCH_CAP = 16000


def cap_patch(patch: str, cap: int) -> str:
    """The patch, or its first ``cap`` characters and a marker saying how much was cut."""
    if len(patch) <= cap:
        return patch
    cut = patch[:cap]
    cut = cut[: cut.rfind("\n") + 1] or cut  # end on a whole line
    return f"{cut}[... patch cut here: {len(patch) - len(cut)} more characters not shown ...]\n"


def episode_conclusion(state: dict[str, Any], cap: int = DEFAULT_PATCH_CAP) -> str:
    """What the next round sees of an episode: its patch and note; empty when there is nothing to show."""
    patch = state.get("patch") or ""
    if state.get("stop_reason") == "error" or not patch.strip():
        return ""
    note = (state.get("note") or "").strip()
    text = f"Patch:\n```diff\n{cap_patch(patch, cap)}```"
    return f"{text}\n\nNote: {note}" if note else text


def _episode_input(messages: list[Any], episode: EpisodeContext) -> dict[str, Any]:
    return {"messages": messages, "task": episode.payload}


def _episode_record(state: dict[str, Any], episode: EpisodeContext) -> dict[str, Any]:
    return {**state["record"], "round_index": episode.round_index, "index": episode.index}


class InstanceOutcome(BaseModel):
    """One instance after PaCoRe: the prediction and everything that led to it."""

    instance_id: str
    model_patch: str = ""
    note: str = ""
    error: str | None = None
    completed: bool = Field(description="some episode ran to its end: the prediction stands (an empty patch too)")
    ttc: int = 0
    seconds: float = Field(0.0, description="the episodes' seconds, summed (those before a restart too)")
    rounds: list[dict[str, Any]] = Field(default_factory=list)
    episodes: list[dict[str, Any]] = Field(default_factory=list)
    hosts: dict[str, int] = Field(default_factory=dict, description="episodes per host that ran them")
    moves: list[dict[str, Any]] = Field(
        default_factory=list,
        description="episodes started again on another host: round_index, index, from_host, to_host, reason",
    )


class SweSolver:
    """PaCoRe's explorer over repair episodes, reused for every instance of a run.

    ``problem(row)`` is what the batch engine solves for a task row; ``outcome(...)`` reads what came of it.
    ``model_step`` replaces each model call of an episode and ``protocol`` says what its references are
    (see :mod:`~pacore_agents.swe.per_call`).
    """

    def __init__(
        self,
        model: BaseChatModel,
        config: PaCoReConfig,
        settings: RepairSettings | None = None,
        *,
        patch_cap: int = DEFAULT_PATCH_CAP,
        open_sandbox: Callable[[dict[str, Any]], Any] | None = None,
        model_step: Callable[[Runnable[Any, Any]], Runnable[Any, Any]] | None = None,
        protocol: PaCoReProtocol = "episodes",
    ):
        self.config = config
        self.episode = RepairEpisode(
            model, settings, open_sandbox=open_sandbox, model_step=model_step, protocol=protocol
        )
        self.explorer = AgentExplorer(
            RunnableLambda(self.episode.ainvoke, name="repair_episode"),
            input=_episode_input,
            output=lambda state: episode_conclusion(state, patch_cap),
            record=_episode_record,
            isolate=True,
        )

    def problem(self, row: dict[str, Any]) -> Problem:
        return Problem(row["instance_id"], self.episode.messages_for(row), payload=row)

    def outcome(self, outcome: ProblemOutcome) -> InstanceOutcome:
        """The prediction of one instance (the final round's episode's patch) and the account of its episodes.

        A failed round (no usable patch) still yields a prediction, empty, when some episode ran to its
        end; an instance whose episodes all crashed is not ``completed``: it is left to the next run.
        """
        error = outcome.error
        message = None
        if error is not None:
            message = str(error) if isinstance(error, RoundFailedError) else f"{type(error).__name__}: {error}"
        final_round = len(self.config.schedule) - 1
        records = _latest_records(outcome.records)
        final = next((e for e in records if e["round_index"] == final_round and e["stop_reason"] != "error"), None)
        crashed = [e for e in records if e["stop_reason"] == "error"]
        if message and crashed:
            message = f"{message}; first episode error: {crashed[0]['error']}"
        homeless = _no_host(error)
        if homeless:  # no sandbox host could take an episode: one line saying which hosts are down and why
            message = homeless
        hosts = Counter(e["host"] for e in records if e.get("host") and e["stop_reason"] != "error")
        moves = [
            {"round_index": e["round_index"], "index": e["index"], **move}
            for e in records
            for move in e.get("moves", [])
        ]
        return InstanceOutcome(
            instance_id=outcome.problem.id,
            model_patch=(final or {}).get("patch", ""),
            note=(final or {}).get("note", ""),
            error=message,
            completed=homeless is None and any(e["stop_reason"] not in ("error", "cancelled") for e in records),
            ttc=sum(e["completion_tokens"] for e in records),
            seconds=round(sum(e["seconds"] for e in records), 3),
            rounds=[r.model_dump() for r in outcome.result.rounds] if outcome.result else [],
            episodes=records,
            hosts=dict(sorted(hosts.items())),
            moves=moves,
        )

    def close(self) -> None:
        self.episode.shutdown()


def _no_host(error: BaseException | None) -> str | None:
    """The placement's line when the instance failed because no sandbox host answered (``--runtime swerex``)."""
    if not isinstance(error, RoundFailedError):
        return None
    for trajectory in error.round.trajectories:
        if trajectory.error_type == "NoHostAvailable" and trajectory.error:
            return trajectory.error.removeprefix("NoHostAvailable: ").splitlines()[0]
    return None


def _latest_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per episode, in round order: an episode killed after its record and run again keeps its last."""
    latest = {(r["round_index"], r["index"]): r for r in records}
    return [latest[key] for key in sorted(latest)]
