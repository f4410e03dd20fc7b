"""PaCoRe over repair episodes: the operator's fan-out runs whole episodes instead of chat calls.

Round r runs K_r episodes, each in its own fresh sandbox, concurrently (the operator's Send fan-out
and its run-wide limiter; nothing here fans out). An episode is compacted to its patch (capped, with
a marker when cut) plus its note; the operator renders those as the Reference Responses of the next
round's user message, exactly as in the chat case. The final episode's patch is the prediction. An
episode that crashed or left no patch compacts to an empty conclusion, which the operator records
and never passes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field

from pacore_agents.swe.repair_agent import EPISODES_KEY, TASK_KEY, RepairEpisode, RepairSettings
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorer import AgentExplorer
from pacore_graph.run import PaCoReRunner

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


class InstanceOutcome(BaseModel):
    """One instance after PaCoRe: the prediction and everything that led to it."""

    instance_id: str
    model_patch: str = ""
    note: str = ""
    error: str | None = None
    completed: bool = Field(description="some episode ran to its end: the prediction stands (an empty patch too)")
    ttc: int = 0
    seconds: float = 0.0
    rounds: list[dict[str, Any]] = Field(default_factory=list)
    episodes: list[dict[str, Any]] = Field(default_factory=list)


class SweSolver:
    """One PaCoRe runner over repair episodes, reused for every instance of a run."""

    def __init__(
        self,
        model: BaseChatModel,
        config: PaCoReConfig,
        settings: RepairSettings | None = None,
        *,
        patch_cap: int = DEFAULT_PATCH_CAP,
        open_sandbox: Callable[[dict], Any] | None = None,
    ):
        self.config = config
        self.episode = RepairEpisode(model, settings, open_sandbox=open_sandbox)
        explorer = AgentExplorer(self.episode.as_runnable(), output=lambda state: episode_conclusion(state, patch_cap))
        self.runner = PaCoReRunner(explorer, config)

    @property
    def schedule(self) -> list[int]:
        return self.config.schedule

    async def solve(self, row: dict, *, on_event: Callable[[dict[str, Any]], None] | None = None) -> InstanceOutcome:
        """Run every round for ``row``; never raises for a failed round (the outcome says why)."""
        episodes: list[dict[str, Any]] = []
        configurable = {TASK_KEY: row, EPISODES_KEY: episodes}
        started = time.monotonic()
        messages = self.episode.messages_for(row)
        rounds: list[dict[str, Any]] = []
        error = None
        try:
            result = await self.runner.arun(messages, {"configurable": configurable}, on_event=on_event)
            rounds = [r.model_dump() for r in result.rounds]
        except RoundFailedError as exc:
            error = str(exc)
        final_round = len(self.schedule) - 1
        episodes.sort(key=lambda e: (e["round_index"], e["index"]))
        final = next((e for e in episodes if e["round_index"] == final_round and e["stop_reason"] != "error"), None)
        crashed = [e for e in episodes if e["stop_reason"] == "error"]
        if error and crashed:
            error = f"{error}; first episode error: {crashed[0]['error']}"
        return InstanceOutcome(
            instance_id=row["instance_id"],
            model_patch=(final or {}).get("patch", ""),
            note=(final or {}).get("note", ""),
            error=error,
            completed=any(e["stop_reason"] not in ("error", "cancelled") for e in episodes),
            ttc=sum(e["completion_tokens"] for e in episodes),
            seconds=round(time.monotonic() - started, 3),
            rounds=rounds,
            episodes=episodes,
        )

    def close(self) -> None:
        self.episode.shutdown()
