"""The paper's protocol applied to an agent: ONE repair episode, each model call of it a PaCoRe run.

At every step of the episode the agent's model call is replaced by :func:`pacore_model_call`: K_1
proposals (each a tool-bound model reply that may call ``bash`` / ``submit``) sent with the episode's
conversation so far, compacted to their text plus rendered tool calls, synthesised over the schedule's
rounds; the final round's message, tool calls included, is the step's action. The same agent graph and
the same run as the episodes protocol (:mod:`episodes`), whose schedule becomes a single trajectory: the
one episode, in one sandbox. Its record's messages each carry their step's rounds (``pacore``).

Token accounting: the step's message counts every proposal and synthesis in its ``usage_metadata``,
which the episode record adds up. A killed run starts an unfinished instance's episode over.

Concurrency: every step of every instance runs on one runner, so ``config.max_concurrency``
(``--max-concurrency``) bounds the model calls in flight over the whole run, and one step may use all of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from pacore_agents.swe.episodes import DEFAULT_PATCH_CAP, SweSolver
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_graph import PaCoReConfig
from pacore_graph.extend import PaCoReRunner, RunProgress, run_sync

MODEL_CALLS = "model calls"


def pacore_model_call(
    model: Runnable[Any, Any], pacore_config: PaCoReConfig, *, on_event: Callable[[dict[str, Any]], None] | None = None
) -> Runnable[Sequence[BaseMessage], AIMessage]:
    """A model call that is a PaCoRe run over ``model`` (tools bound): messages in, the synthesised reply out.

    The reply's ``response_metadata["pacore"]`` holds the rounds (per-proposal tokens) and its
    ``usage_metadata`` every token of every proposal. Callbacks see one ``pacore_model_call`` run per step with
    its proposals and syntheses under it; ``on_event`` gets the operator's progress events. Every call runs
    on one runner: its limiter bounds the proposals in flight over all calls (all steps, all episodes).
    """
    runner = PaCoReRunner(model, pacore_config)

    async def acall(messages: Sequence[BaseMessage], config: RunnableConfig) -> AIMessage:
        return (await runner.arun(messages, config, on_event=on_event)).message

    def call(messages: Sequence[BaseMessage], config: RunnableConfig) -> AIMessage:
        return run_sync(acall(messages, config))

    return RunnableLambda(call, acall, name="pacore_model_call")


def count_model_calls(progress: RunProgress) -> Callable[[dict[str, Any]], None]:
    """Progress events to one bar: model calls finished of those started (an episode's length is unknown)."""

    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "round_started":
            progress.add(MODEL_CALLS, event["k"])
        elif kind in ("trajectory_finished", "trajectory_failed", "trajectory_cut"):
            progress.advance(MODEL_CALLS)

    return on_event


def per_call_solver(
    model: BaseChatModel,
    config: PaCoReConfig,
    settings: RepairSettings | None = None,
    *,
    patch_cap: int = DEFAULT_PATCH_CAP,
    open_sandbox: Callable[[dict[str, Any]], Any] | None = None,
    progress: RunProgress | None = None,
) -> SweSolver:
    """A solver for the batch engine: one episode per instance, each of its model calls PaCoRe with ``config``."""
    on_event = count_model_calls(progress) if progress is not None else None
    return SweSolver(
        model,
        config.model_copy(update={"rounds": []}),  # the instance: one trajectory, the episode
        settings,
        patch_cap=patch_cap,
        open_sandbox=open_sandbox,
        model_step=lambda bound: pacore_model_call(bound, config, on_event=on_event),
        protocol="per-call",
    )
