"""``asolve``: PaCoRe as a plain async function; the node and the resumable runs use the same runner."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias, TypedDict, Unpack

from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig, ensure_config
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphInterrupt
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer, Durability, Interrupt, StateSnapshot

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.panel import model_accounts
from pacore_graph.explorers.panel import Models
from pacore_graph.graph.builder import build_pacore_graph
from pacore_graph.graph.context import PaCoReContext, unobserved
from pacore_graph.graph.gc_policy import spaced_full_collections
from pacore_graph.graph.own_thread import OwnThread, async_capable, claimed, lent_saver, own_thread
from pacore_graph.graph.reuse_pool import Reusable, ReusePool, reuse_pool
from pacore_graph.graph.run_state import ProgressListener, RecordSink
from pacore_graph.graph.state import PaCoReState
from pacore_graph.graph.unseen import ambient_unseen_removed, unseen_removed
from pacore_graph.records import (
    Outcome,
    PaCoReResult,
    ReuseReport,
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
        model_or_explorer: Models,
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
        reuse: ReusePool | None = None,
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
            reuse=reuse,
        )

    @contextmanager
    def running(self, context: PaCoReContext) -> Iterator[None]:
        """Around one graph run: GC spacing if configured, and the run closed at the end however it ends
        (its trajectories still in flight cancelled, whatever LangGraph's own cleanup managed)."""
        with spaced_full_collections(self.config.spaced_gc), ambient_unseen_removed(context.unobserved):
            try:
                yield
            finally:
                context.run_state.close()

    def run_config(
        self, runnable_config: RunnableConfig | None, context: PaCoReContext, *, sync: bool
    ) -> RunnableConfig:
        """All K trajectory tasks start together: a graph-level max_concurrency of the caller does not
        throttle them (PaCoReConfig.max_concurrency bounds the model calls), and a sync run gets a thread
        per trajectory instead of the default pool of a few. A run nobody observes leaves out what only
        callback handlers would read (see :mod:`pacore_graph.graph.unseen`)."""
        run: RunnableConfig = runnable_config.copy() if runnable_config else {}
        if sync or run.get("max_concurrency"):
            run["max_concurrency"] = max(self.config.schedule)
        return unseen_removed(run) if context.unobserved else run

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
        reuse: Reusable | None = None,
    ) -> PaCoReResult:
        """Run (or with ``resume=True`` continue) PaCoRe over ``messages``.

        ``trace=True`` keeps every full trajectory (``result.trajectories``); ``on_event`` receives progress
        events; ``payload`` and ``on_record`` reach the explorer (see :class:`PaCoReContext`). A saver that
        serves sync runs only (``SqliteSaver``, ``PostgresSaver``: the runner's own, or the one a sync agent
        lends) checkpoints a sync graph run, in a worker thread. ``reuse``: an earlier result of the same
        problem at a smaller schedule (a result, its row, its rounds), whose trajectories this run takes where
        they are draws of its own requests instead of sending them (:mod:`pacore_graph.graph.reuse`).
        """
        pool = reuse_pool(reuse, self.config) if reuse is not None else None  # refused before anything is sent
        context = self.context(
            messages,
            runnable_config,
            trace=trace,
            on_event=on_event,
            payload=payload,
            on_record=on_record,
            reuse=pool,
        )
        saver = lent_saver(runnable_config) if self.borrows_saver else self.graph.checkpointer
        sync = isinstance(saver, BaseCheckpointSaver) and not await async_capable(saver)
        run = self.run_config(runnable_config, context, sync=sync)
        with self.running(context), self.thread_of(run, context) as own:
            run = own.runnable_config if own is not None else run
            graph = _SyncGraph(self.graph) if sync else self.graph
            snapshot = await graph.aget_state(run) if own is not None or resume else None
            graph_input = self.graph_input(context, snapshot, resume)
            output = await graph.ainvoke(graph_input, run, context=context, durability=durability, version="v2")
            result = build_result(output.value, context.trace, output.interrupts, self.config.answer_records == "full")
            if pool is not None:
                result = with_reuse_report(result, pool.report(result), self.config.answer_records == "full")
            if own is not None:
                await forget(own, sync)
        return result

    def run(
        self, messages: MessagesInput, runnable_config: RunnableConfig | None = None, **options: Unpack[RunOptions]
    ) -> PaCoReResult:
        """Sync :meth:`arun`, on the background loop of :mod:`pacore_graph.concurrency.sync`: Ctrl-C closes the
        run (its requests stop) before the interrupt goes on."""
        return run_sync(self.arun(messages, runnable_config, **options))

    @contextmanager
    def thread_of(self, runnable_config: RunnableConfig, context: PaCoReContext) -> Iterator[OwnThread | None]:
        """The run's own thread, held for the run, when it runs inside a checkpointed graph (see
        :mod:`pacore_graph.graph.own_thread`); None when it has a saver of its own or none at all."""
        own = own_thread(runnable_config, context.messages, self.config.schedule) if self.borrows_saver else None
        if own is None:
            yield None
            return
        with claimed(own) as held:
            yield held

    def graph_input(self, context: PaCoReContext, snapshot: StateSnapshot | None, resume: bool) -> Any:
        """What the graph is invoked with: a new run's input, or (asked to resume, or finding its own thread
        unfinished) None, after the run learns from the checkpoint the rounds it finished (the next round's
        trajectories read their references there: Send arguments carry indices only) and how many trajectories
        of the round it resumes are still to run (the round's barrier counts on them: graph/barrier.py)."""
        if snapshot is None or not (resume or snapshot.next):
            return START_INPUT
        run = context.run_state
        for data in finished_rounds(snapshot.values):
            run.finished(data)
        unfinished = sum(1 for task in snapshot.tasks if task.name == "trajectory" and task.result is None)
        round_index = snapshot.values.get("round_index", 0)
        if unfinished and round_index < len(self.config.schedule):
            run.resume(round_index, self.config.schedule[round_index], unfinished)
        return None


class RunOptions(TypedDict, total=False):
    """The keyword options of :meth:`PaCoReRunner.arun`, for its sync form."""

    resume: bool
    durability: Durability | None
    trace: bool
    on_event: ProgressListener | None
    payload: Any
    on_record: RecordSink | None
    reuse: Reusable | None


class _SyncGraph:
    """A compiled graph whose saver serves sync runs only, run from async code: each call in a worker thread."""

    def __init__(self, graph: CompiledStateGraph[Any, Any, Any, Any]):
        self.graph = graph

    async def aget_state(self, runnable_config: RunnableConfig) -> StateSnapshot:
        return await asyncio.to_thread(self.graph.get_state, runnable_config)

    async def ainvoke(self, graph_input: Any, runnable_config: RunnableConfig, **kwargs: Any) -> Any:
        return await asyncio.to_thread(lambda: self.graph.invoke(graph_input, runnable_config, **kwargs))


async def forget(own: OwnThread, sync: bool) -> None:
    """Deletes a finished run's own thread (a saver that cannot delete keeps it: see docs/checkpointing.md)."""
    try:
        if sync:
            await asyncio.to_thread(own.saver.delete_thread, own.thread_id)
        else:
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
    result.models = model_accounts(rounds, result.answer)  # a panel run's account per model ({} otherwise)
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


def with_reuse_report(result: PaCoReResult, report: ReuseReport, full_records: bool) -> PaCoReResult:
    """``result`` with what it took from an earlier one, in its accounting and its answer message's too."""
    result.reuse = report
    metadata = {**result.message.response_metadata, "pacore": result.accounting(full_records)}
    result.message = result.message.model_copy(update={"response_metadata": metadata})
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
    model_or_explorer: Models,
    messages: MessagesInput,
    config: PaCoReConfig | None = None,
    *,
    checkpointer: Checkpointer = None,
    runnable_config: RunnableConfig | None = None,
    trace: bool = False,
    on_event: ProgressListener | None = None,
    payload: Any = None,
    on_record: RecordSink | None = None,
    reuse: Reusable | None = None,
) -> PaCoReResult:
    """Run PaCoRe once over ``messages`` (a problem string or a conversation).

    ``trace=True`` keeps every full trajectory (``result.trajectories``), ``on_event`` receives progress
    events, ``payload`` / ``on_record`` reach the explorer (see :class:`~pacore_graph.graph.context.PaCoReContext`).
    ``reuse=earlier_result`` continues an earlier run of the same problem at this (larger) schedule: its
    trajectories that are draws of this run's requests are taken, not sent again (``result.reuse`` says how many).
    """
    runner = PaCoReRunner(model_or_explorer, config, checkpointer=checkpointer)
    return await runner.arun(
        messages,
        runnable_config,
        trace=trace,
        on_event=on_event,
        payload=payload,
        on_record=on_record,
        reuse=reuse,
    )


def solve(
    model_or_explorer: Models,
    messages: MessagesInput,
    config: PaCoReConfig | None = None,
    *,
    checkpointer: Checkpointer = None,
    runnable_config: RunnableConfig | None = None,
    trace: bool = False,
    on_event: ProgressListener | None = None,
    payload: Any = None,
    on_record: RecordSink | None = None,
    reuse: Reusable | None = None,
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
            reuse=reuse,
        )
    )
