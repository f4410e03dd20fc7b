"""The paper's protocol applied to an agent: ONE repair episode, each model call of it a PaCoRe run.

At every step of the episode the agent's model call is replaced by :class:`PaCoReModelCall`: K_1
proposals (each a tool-bound model reply that may call ``bash`` / ``submit``) sent with the episode's
conversation so far, compacted to their text plus rendered tool calls, synthesised over R rounds; the
final round's message, tool calls included, is the step's action. Same agent graph, same sandbox
for the whole episode, same outputs as the episodes protocol (:mod:`episodes`): one episode record whose
messages each carry the PaCoRe rounds' token counts of their step.

Token accounting: every proposal and synthesis of every step is counted (the answer message's
``usage_metadata`` sums them; the episode record adds those up). A killed run starts an unfinished
instance over: one episode has no finished parts to keep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig

from pacore_agents.swe.episodes import InstanceOutcome
from pacore_agents.swe.repair_episode import RepairEpisode
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_graph import PaCoReConfig, asolve, solve


class PaCoReModelCall(Runnable[Sequence[BaseMessage], AIMessage]):
    """A model call that is a PaCoRe run over ``model`` (tools bound): messages in, the synthesised reply out.

    The reply's ``response_metadata["pacore"]`` holds the rounds (per-proposal tokens) and its
    ``usage_metadata`` every token of every proposal. Callbacks of the caller's config see each call.
    """

    def __init__(self, model: Runnable, config: PaCoReConfig):
        self.model, self.config = model, config
        self.name = "pacore_model_call"

    async def ainvoke(self, input: Sequence[BaseMessage], config: RunnableConfig | None = None, **kwargs: Any):
        return (await asolve(self.model, input, self.config, runnable_config=config)).message

    def invoke(self, input: Sequence[BaseMessage], config: RunnableConfig | None = None, **kwargs: Any):
        return solve(self.model, input, self.config, runnable_config=config).message


class ModelCallEvents(BaseCallbackHandler):
    """Turns each finished chat-model run into a ``model_call_finished`` progress event."""

    run_inline = True

    def __init__(self, on_event: Callable[[dict[str, Any]], None]):
        self.on_event = on_event

    def on_llm_end(self, response, **kwargs: Any) -> None:
        self.on_event({"event": "model_call_finished"})


def step_rounds(message: BaseMessage) -> list[dict[str, Any]] | None:
    """Per round of one PaCoRe step: K, proposals that failed, prompt and completion tokens (None: not PaCoRe)."""
    account = isinstance(message, AIMessage) and message.response_metadata.get("pacore")
    if not account:
        return None
    return [
        {
            "round_index": r["round_index"],
            "k": r["k"],
            "failed": sum(1 for t in r["trajectories"] if t.get("error")),
            "prompt_tokens": sum(t.get("prompt_tokens", 0) for t in r["trajectories"]),
            "completion_tokens": sum(t.get("completion_tokens", 0) for t in r["trajectories"]),
        }
        for r in account["rounds"]
    ]


class PerCallSolver:
    """Solves an instance with one episode whose every model call is PaCoRe; the interface of ``SweSolver``."""

    episodes_per_instance = None  # progress counts model calls instead (their number is not known ahead)

    def __init__(
        self,
        model: BaseChatModel,
        config: PaCoReConfig,
        settings: RepairSettings | None = None,
        *,
        open_sandbox: Callable[[dict], Any] | None = None,
    ):
        self.config = config
        self.episode = RepairEpisode(
            model, settings, open_sandbox=open_sandbox, model_step=lambda bound: PaCoReModelCall(bound, config)
        )

    def thread_for(self, row: dict) -> None:
        return None  # nothing to resume inside one episode: its sandbox does not outlive the process

    async def forget(self, row: dict) -> None:
        return None

    async def solve(
        self,
        row: dict,
        *,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        episodes: list[dict[str, Any]] | None = None,
    ) -> InstanceOutcome:
        """Run the episode for ``row``; never raises for a failed step (the outcome says why)."""
        started = time.monotonic()
        config: RunnableConfig = {"callbacks": [ModelCallEvents(on_event)]} if on_event else {}
        state = await self.episode.ainvoke({"messages": self.episode.messages_for(row), "task": row}, config)
        record = {**state["record"], "round_index": 0, "index": 0}
        for message, kept in zip(state.get("messages") or [], record["messages"], strict=True):
            rounds = step_rounds(message)
            if rounds is not None:
                kept["pacore"] = rounds
        if episodes is not None:
            episodes.append(record)
        return InstanceOutcome(
            instance_id=row["instance_id"],
            model_patch=record["patch"],
            note=record["note"],
            error=record["error"],
            completed=record["stop_reason"] not in ("error", "cancelled"),
            ttc=record["completion_tokens"],
            seconds=round(time.monotonic() - started, 3),
            episodes=[record],
        )

    def close(self) -> None:
        self.episode.shutdown()
