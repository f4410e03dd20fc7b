"""PaCoRe over repair episodes: the operator's fan-out runs whole episodes instead of chat calls.

Round r runs K_r episodes, each in its own fresh sandbox, concurrently (the operator's Send fan-out
and its run-wide limiter; nothing here fans out). An episode is compacted to its patch (capped, with
a marker when cut) plus its note; the operator renders those as the Reference Responses of the next
round's user message, exactly as in the chat case. The final episode's patch is the prediction. An
episode that crashed or left no patch compacts to an empty conclusion, which the operator records
and never passes on.

Resume: compiled with a checkpointer, each instance runs on its own checkpoint thread, so a restart
after a kill re-runs only the episodes that had not finished (the finished ones are LangGraph pending
writes). Their records then come from the caller's episode sink (see ``run.EpisodeLog``), not memory.
Episodes are isolated (``AgentExplorer(isolate=True)``): an interrupted one starts over in a new sandbox
instead of continuing a half-done episode in a sandbox that lacks its edits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel, Field

from pacore_agents.swe.repair_episode import RepairEpisode
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_graph.config import PaCoReConfig
from pacore_graph.episode import EpisodeContext
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorer import AgentExplorer
from pacore_graph.resume import solve_resumable, thread_id
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


def _episode_input(messages: list, episode: EpisodeContext) -> dict[str, Any]:
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
    seconds: float = 0.0
    rounds: list[dict[str, Any]] = Field(default_factory=list)
    episodes: list[dict[str, Any]] = Field(default_factory=list)


class SweSolver:
    """One PaCoRe runner over repair episodes, reused for every instance of a run.

    With a ``checkpointer`` (e.g. ``pacore_graph.resume.open_checkpointer``) every instance runs on
    the thread :meth:`thread_for` names; ``salt`` (e.g. the model name) keeps runs that send different
    things apart. The caller deletes a thread with :meth:`forget` once the instance's result is stored.
    """

    def __init__(
        self,
        model: BaseChatModel,
        config: PaCoReConfig,
        settings: RepairSettings | None = None,
        *,
        patch_cap: int = DEFAULT_PATCH_CAP,
        open_sandbox: Callable[[dict], Any] | None = None,
        checkpointer: Any = None,
        salt: Sequence[str] = (),
    ):
        self.config = config
        self.episode = RepairEpisode(model, settings, open_sandbox=open_sandbox)
        # What changes an episode beyond its messages and the schedule: part of the thread id.
        behaviour = self.episode.settings.model_dump_json(exclude={"threads", "retry"})
        self.salt = (*salt, behaviour, str(patch_cap))
        explorer = AgentExplorer(
            RunnableLambda(self.episode.ainvoke, name="repair_episode"),
            input=_episode_input,
            output=lambda state: episode_conclusion(state, patch_cap),
            record=_episode_record,
            isolate=True,
        )
        self.runner = PaCoReRunner(explorer, config, checkpointer=checkpointer)

    @property
    def schedule(self) -> list[int]:
        return self.config.schedule

    @property
    def episodes_per_instance(self) -> int:
        return sum(self.schedule)

    @property
    def checkpointer(self) -> Any:
        return self.runner.graph.checkpointer

    def thread_for(self, row: dict) -> str | None:
        """The checkpoint thread of ``row`` (None without a checkpointer: nothing resumes)."""
        if self.checkpointer is None:
            return None
        return thread_id(row["instance_id"], self.episode.messages_for(row), self.config, *self.salt)

    async def forget(self, row: dict) -> None:
        """Delete the checkpoints of ``row``: call it once its result is on disk."""
        thread = self.thread_for(row)
        if thread is not None:
            await self.checkpointer.adelete_thread(thread)

    async def solve(
        self,
        row: dict,
        *,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        episodes: list[dict[str, Any]] | None = None,
    ) -> InstanceOutcome:
        """Run every round for ``row``; never raises for a failed round (the outcome says why).

        ``episodes`` receives each finished episode's record (a list by default); on a resumed thread it
        must already hold the records of the episodes finished before the restart, or they are missing.
        """
        episodes = [] if episodes is None else episodes
        context = {"payload": row, "on_record": episodes.append, "on_event": on_event}
        started = time.monotonic()
        messages = self.episode.messages_for(row)
        rounds: list[dict[str, Any]] = []
        error = None
        thread = self.thread_for(row)
        try:
            if thread is None:
                result = await self.runner.arun(messages, **context)
            else:
                result, _ = await solve_resumable(self.runner, messages, thread, **context)
            rounds = [r.model_dump() for r in result.rounds]
        except RoundFailedError as exc:
            error = str(exc)
        final_round = len(self.schedule) - 1
        records = sorted(episodes, key=lambda e: (e["round_index"], e["index"]))
        final = next((e for e in records if e["round_index"] == final_round and e["stop_reason"] != "error"), None)
        crashed = [e for e in records if e["stop_reason"] == "error"]
        if error and crashed:
            error = f"{error}; first episode error: {crashed[0]['error']}"
        return InstanceOutcome(
            instance_id=row["instance_id"],
            model_patch=(final or {}).get("patch", ""),
            note=(final or {}).get("note", ""),
            error=error,
            completed=any(e["stop_reason"] not in ("error", "cancelled") for e in records),
            ttc=sum(e["completion_tokens"] for e in records),
            seconds=round(time.monotonic() - started, 3),
            rounds=rounds,
            episodes=records,
        )

    def close(self) -> None:
        self.episode.shutdown()
