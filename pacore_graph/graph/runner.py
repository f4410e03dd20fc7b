"""``asolve``: PaCoRe as a plain async function; the node and the resumable runs use the same runner."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig, ensure_config
from langgraph.errors import GraphInterrupt
from langgraph.types import Checkpointer, Durability, Interrupt, StateSnapshot

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import call_interruptibly, run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.protocol import ModelOrExplorer
from pacore_graph.graph.builder import build_pacore_graph
from pacore_graph.graph.context import PaCoReContext, ProgressListener, RecordSink, run_state, unobserved
from pacore_graph.graph.gc_policy import spaced_full_collections
from pacore_graph.graph.own_thread import OwnThread, async_capable, claimed, lent_saver, own_thread
from pacore_graph.graph.state import PaCoReState
from pacore_graph.graph.unseen import ambient_unseen_removed, unseen_removed
from pacore_graph.records import (
    Outcome,
    PaCoReResult,
    RoundData,
    RoundRecord,
    Trajectory,
    TrajectoryRecord,
    round_data_of,
)

MessagesInput: TypeAlias = str | Sequence[BaseMessage | dict[str, Any] | tuple[str, str]]
"""The conversation PaCoRe answers: a problem string (one user message), LangChain messages, OpenAI-style
``{"role": ..., "content": ...}`` dicts, or ``(role, content)`` pairs."""

START_INPUT: PaCoReState = {"round_index": 0}  # any input starts a run; `begin` sets the real state


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
    """A compiled PaCoRe graph plus its run-wide concurrency limiter; reusable across problems.

    Without a ``checkpointer`` of its own, a run inside a checkpointed graph (a node, a model call in an
    agent) checkpoints with that graph's saver on a thread of its own, which is deleted once the answer is
    returned (see :mod:`pacore_graph.graph.own_thread`); ``checkpointer=False`` never checkpoints.
    Runners given one ``limiter`` share its bound on in-flight trajectories (e.g. one per server).
    """

    def __init__(
        self,
        model_or_explorer: ModelOrExplorer,
        config: PaCoReConfig | None = None,
        *,
        checkpointer: Checkpointer = None,
        limiter: ConcurrencyLimiter | None = None,
    ):
        self.config = config or PaCoReConfig()
        self.borrows_saver = checkpointer is None  # inside a checkpointed graph, runs on a thread of its own
        self.limiter = limiter or ConcurrencyLimiter(self.config.max_concurrency)
        builder = build_pacore_graph(model_or_explorer, self.config, limiter=self.limiter)
        self.graph = builder.compile(checkpointer=checkpointer, name="pacore")

    def context(
        self,
        messages: MessagesInput,
        runnable_config: RunnableConfig | None = None,
        *,
        trace: bool = False,
        on_event: ProgressListener | None = None,
        payload: Any = None,
        on_record: RecordSink | None = None,
    ) -> PaCoReContext:
        """The runtime context of one run; model calls carry the enclosing graph node's stream metadata."""
        metadata = ensure_config(runnable_config).get("metadata") or {}
        return PaCoReContext(
            messages=to_messages(messages),
            payload=payload,
            on_event=on_event,
            on_record=on_record,
            trace=[] if trace else None,
            stream_metadata={key: value for key, value in metadata.items() if key.startswith("langgraph_")},
            unobserved=unobserved(runnable_config),
        )

    @contextmanager
    def running(self, context: PaCoReContext) -> Iterator[None]:
        """Around one graph run: GC spacing if configured, and the run closed at the end however it ends
        (its trajectories still in flight cancelled, whatever LangGraph's own cleanup managed)."""
        with spaced_full_collections(self.config.spaced_gc), ambient_unseen_removed(context.unobserved):
            try:
                yield
            finally:
                run_state(context).close()

    def run_config(
        self, runnable_config: RunnableConfig | None, context: PaCoReContext, *, sync: bool
    ) -> RunnableConfig:
        """All K trajectory tasks start together: a graph-level max_concurrency of the caller does not
        throttle them (PaCoReConfig.max_concurrency bounds the model calls), and a sync run gets a thread
        per trajectory instead of the default pool of a few. A run nobody observes leaves out what only
        callback handlers would read (see :mod:`pacore_graph.graph.unseen`)."""
        config: RunnableConfig = runnable_config.copy() if runnable_config else {}
        if sync or config.get("max_concurrency"):
            config["max_concurrency"] = max(self.config.schedule)
        return unseen_removed(config) if context.unobserved else config

    async def arun(
        self,
        messages: MessagesInput,
        runnable_config: RunnableConfig | None = None,
        *,
        resume: bool = False,
        durability: Durability | None = None,
        trace: bool = False,
        on_event: ProgressListener | None = None,
        payload: Any = None,
        on_record: RecordSink | None = None,
    ) -> PaCoReResult:
        """Run (or with ``resume=True`` continue) PaCoRe over ``messages``.

        ``trace=True`` keeps every full trajectory (``result.trajectories``); ``on_event`` receives progress
        events; ``payload`` and ``on_record`` reach the explorer (see :class:`PaCoReContext`).
        """
        saver = lent_saver(runnable_config) if self.borrows_saver else None
        if saver is not None and not await async_capable(saver):  # e.g. a sync agent's SqliteSaver or PostgresSaver
            return await asyncio.to_thread(
                self.run,
                messages,
                runnable_config,
                resume=resume,
                durability=durability,
                trace=trace,
                on_event=on_event,
                payload=payload,
                on_record=on_record,
            )
        context = self.context(
            messages, runnable_config, trace=trace, on_event=on_event, payload=payload, on_record=on_record
        )
        config = self.run_config(runnable_config, context, sync=False)
        with self.running(context), self.thread_of(config, context) as own:
            snapshot = None
            if own is not None or resume:
                config = own.config if own is not None else config
                snapshot = await self.graph.aget_state(config)
            graph_input = self.graph_input(context, snapshot, resume)
            output = await self.graph.ainvoke(graph_input, config, context=context, durability=durability, version="v2")
            result = build_result(output.value, context.trace, output.interrupts, self.config.answer_records == "full")
            if own is not None:
                await aforget(own)
        return result

    def run(
        self,
        messages: MessagesInput,
        runnable_config: RunnableConfig | None = None,
        *,
        resume: bool = False,
        durability: Durability | None = None,
        trace: bool = False,
        on_event: ProgressListener | None = None,
        payload: Any = None,
        on_record: RecordSink | None = None,
    ) -> PaCoReResult:
        """Sync :meth:`arun`: a sync LangGraph run (sync checkpointers work); Ctrl-C stops its requests."""
        context = self.context(
            messages, runnable_config, trace=trace, on_event=on_event, payload=payload, on_record=on_record
        )
        config = self.run_config(runnable_config, context, sync=True)
        with self.running(context), self.thread_of(config, context) as own:
            snapshot = None
            if own is not None or resume:
                config = own.config if own is not None else config
                snapshot = self.graph.get_state(config)
            graph_input = self.graph_input(context, snapshot, resume)
            output = call_interruptibly(
                lambda: self.graph.invoke(graph_input, config, context=context, durability=durability, version="v2"),
                run_state(context).close,
            )
            result = build_result(output.value, context.trace, output.interrupts, self.config.answer_records == "full")
            if own is not None:
                forget(own)
        return result

    @contextmanager
    def thread_of(self, config: RunnableConfig, context: PaCoReContext) -> Iterator[OwnThread | None]:
        """The run's own thread, held for the run, when it runs inside a checkpointed graph (see
        :mod:`pacore_graph.graph.own_thread`); None when it has a saver of its own or none at all."""
        own = own_thread(config, context.messages, self.config.schedule) if self.borrows_saver else None
        if own is None:
            yield None
            return
        with claimed(own) as held:
            yield held

    @staticmethod
    def graph_input(context: PaCoReContext, snapshot: StateSnapshot | None, resume: bool) -> Any:
        """What the graph is invoked with: a new run's input, or (asked to resume, or finding its own thread
        unfinished) None, after the run learns the rounds it finished before from the checkpoint (the next
        round's trajectories read their references there: Send arguments carry indices only)."""
        if snapshot is None or not (resume or snapshot.next):
            return START_INPUT
        run = run_state(context)
        for data in finished_rounds(snapshot.values):
            run.round_finished(data)
        return None


def forget(own: OwnThread) -> None:
    """Deletes a finished run's own thread (a saver that cannot delete keeps it: see docs/checkpointing.md)."""
    try:
        own.saver.delete_thread(own.thread_id)
    except NotImplementedError:
        pass


async def aforget(own: OwnThread) -> None:
    """:func:`forget` with an async saver."""
    try:
        await own.saver.adelete_thread(own.thread_id)
    except NotImplementedError:
        pass


def finished_rounds(values: Mapping[str, Any]) -> list[RoundData]:
    """The finished rounds of a PaCoRe graph's state, each with its records."""
    stored = values.get("trajectories", [])
    return [round_data_of(summary, stored) for summary in values.get("rounds", [])]


def build_result(
    state: Mapping[str, Any],
    trace: list[Trajectory] | None = None,
    interrupts: Sequence[Interrupt] = (),
    full_records: bool = False,
) -> PaCoReResult:
    """The result of a finished graph state; its message is the answer with every round's account (counts, or
    every record with ``full_records``: see ``PaCoReConfig.answer_records``).

    A run an explorer interrupted (LangGraph's ``interrupt()`` in an agent) has no result: its ``interrupts``
    (beside the final values in ``version="v2"`` output, which the runs ask for: v1 ``invoke`` also streams
    every task's update to the run, only to find interrupts) are raised to the caller as ``GraphInterrupt``,
    as a graph running it as a subgraph raises them."""
    if interrupts:
        raise GraphInterrupt(interrupts)
    rounds = [RoundRecord.model_validate(data) for data in finished_rounds(state)]
    answer: AIMessage = state["answer"]
    outcome = Outcome.model_validate(state.get("outcome") or {})
    final = chosen_trajectory(rounds, outcome)
    result = PaCoReResult(
        answer=str(answer.content), rounds=rounds, message=answer, trajectories=trace, outcome=outcome
    )
    prompt_tokens = sum(t.prompt_tokens for r in rounds for t in r.trajectories)
    result.message = AIMessage(
        content=result.answer,
        tool_calls=answer.tool_calls,
        name="pacore",
        id=answer.id,
        response_metadata={
            "pacore": result.accounting(full_records),
            "model_name": final.model_name if final else None,
            "finish_reason": final.finish_reason if final else None,
        },
        usage_metadata={
            "input_tokens": prompt_tokens,
            "output_tokens": result.ttc,
            "total_tokens": prompt_tokens + result.ttc,
        },
    )
    return result


def chosen_trajectory(rounds: list[RoundRecord], outcome: Outcome) -> TrajectoryRecord | None:
    """The trajectory whose conclusion is the answer: the final synthesis, or the one a selector chose."""
    if outcome.round_index is not None:
        round_index, index = outcome.round_index, outcome.index
    else:
        last = rounds[-1]
        round_index, index = last.round_index, last.reference_order[0] if last.reference_order else None
    found = (t for r in rounds if r.round_index == round_index for t in r.trajectories if t.index == index)
    return next(found, None)


async def asolve(
    model_or_explorer: ModelOrExplorer,
    messages: MessagesInput,
    config: PaCoReConfig | None = None,
    *,
    checkpointer: Checkpointer = None,
    runnable_config: RunnableConfig | None = None,
    trace: bool = False,
    on_event: ProgressListener | None = None,
    payload: Any = None,
    on_record: RecordSink | None = None,
) -> PaCoReResult:
    """Run PaCoRe once over ``messages`` (a problem string or a conversation).

    ``trace=True`` keeps every full trajectory (``result.trajectories``), ``on_event`` receives progress
    events, ``payload`` / ``on_record`` reach the explorer (see :class:`~pacore_graph.graph.context.PaCoReContext`).
    """
    runner = PaCoReRunner(model_or_explorer, config, checkpointer=checkpointer)
    return await runner.arun(
        messages, runnable_config, trace=trace, on_event=on_event, payload=payload, on_record=on_record
    )


def solve(
    model_or_explorer: ModelOrExplorer,
    messages: MessagesInput,
    config: PaCoReConfig | None = None,
    *,
    checkpointer: Checkpointer = None,
    runnable_config: RunnableConfig | None = None,
    trace: bool = False,
    on_event: ProgressListener | None = None,
    payload: Any = None,
    on_record: RecordSink | None = None,
) -> PaCoReResult:
    """Sync wrapper of :func:`asolve`; Ctrl-C cancels the run's requests."""
    return run_sync(
        asolve(
            model_or_explorer,
            messages,
            config,
            checkpointer=checkpointer,
            runnable_config=runnable_config,
            trace=trace,
            on_event=on_event,
            payload=payload,
            on_record=on_record,
        )
    )
