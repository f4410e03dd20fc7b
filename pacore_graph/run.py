"""``asolve``: PaCoRe as a plain async function; the graph and the node are built on the same runner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from pacore_graph.config import PaCoReConfig
from pacore_graph.gc_policy import spaced_full_collections
from pacore_graph.graph import EVENTS_KEY, TRACE_KEY, build_pacore_graph
from pacore_graph.limits import ConcurrencyLimiter
from pacore_graph.records import PaCoReResult, RoundRecord, Trajectory
from pacore_graph.sync import run_sync

MessagesInput = str | Sequence[BaseMessage | dict[str, Any] | tuple[str, str]]


def to_messages(messages: MessagesInput) -> list[BaseMessage]:
    """A problem string, LangChain messages, or OpenAI-style dicts, as LangChain messages."""
    if isinstance(messages, str):
        if not messages.strip():
            raise ValueError("the problem is empty: PaCoRe needs a non-empty user message")
        return convert_to_messages([("user", messages)])
    converted = convert_to_messages(list(messages))
    if not converted:
        raise ValueError("the message list is empty: PaCoRe needs at least one user message")
    return converted


class PaCoReRunner:
    """A compiled PaCoRe graph plus its run-wide concurrency limiter; reusable across problems."""

    def __init__(
        self,
        model_or_explorer: Any,
        config: PaCoReConfig | None = None,
        *,
        checkpointer: BaseCheckpointSaver | None = None,
    ):
        self.config = config or PaCoReConfig()
        self.limiter = ConcurrencyLimiter(self.config.max_concurrency)
        builder = build_pacore_graph(model_or_explorer, self.config, limiter=self.limiter)
        self.graph = builder.compile(checkpointer=checkpointer, name="pacore")

    async def arun(
        self,
        messages: MessagesInput,
        runnable_config: RunnableConfig | None = None,
        *,
        trace: bool = False,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> PaCoReResult:
        messages = to_messages(messages)
        traced: list[Trajectory] | None = [] if trace else None
        with spaced_full_collections(self.config.spaced_gc):
            state = await self.graph.ainvoke({"messages": messages}, with_listeners(runnable_config, traced, on_event))
        return build_result(state, traced)


def with_listeners(
    runnable_config: RunnableConfig | None,
    trace: list[Trajectory] | None,
    on_event: Callable[[dict[str, Any]], None] | None,
) -> RunnableConfig:
    """A copy of the config whose ``configurable`` carries the run's trace list and event listener.

    Events go straight to the listener: no LangGraph custom stream mode is needed (it costs CPU per event).
    """
    configurable: dict[str, Any] = dict((runnable_config or {}).get("configurable") or {})
    if trace is not None:
        configurable[TRACE_KEY] = trace
    if on_event is not None:
        configurable[EVENTS_KEY] = on_event
    return {**(runnable_config or {}), "configurable": configurable}


def build_result(state: dict[str, Any], trace: list[Trajectory] | None = None) -> PaCoReResult:
    rounds: list[RoundRecord] = state["rounds"]
    answer: AIMessage = state["answer"]
    result = PaCoReResult(answer=str(answer.content), rounds=rounds, message=answer, trajectories=trace)
    prompt_tokens = sum(t.prompt_tokens for r in rounds for t in r.trajectories)
    result.message = AIMessage(
        content=result.answer,
        name="pacore",
        response_metadata={"pacore": result.summary()},
        usage_metadata={
            "input_tokens": prompt_tokens,
            "output_tokens": result.ttc,
            "total_tokens": prompt_tokens + result.ttc,
        },
    )
    return result


async def asolve(
    model_or_explorer: Any,
    messages: MessagesInput,
    config: PaCoReConfig | None = None,
    *,
    trace: bool = False,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    runnable_config: RunnableConfig | None = None,
) -> PaCoReResult:
    """Run PaCoRe once over ``messages`` (a problem string or a conversation)."""
    runner = PaCoReRunner(model_or_explorer, config, checkpointer=checkpointer)
    return await runner.arun(messages, runnable_config, trace=trace, on_event=on_event)


def solve(model_or_explorer: Any, messages: MessagesInput, config: PaCoReConfig | None = None, **kwargs: Any):
    """Sync wrapper of :func:`asolve`."""
    return run_sync(asolve(model_or_explorer, messages, config, **kwargs))
