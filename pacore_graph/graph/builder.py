"""The PaCoRe StateGraph: K trajectories fanned out with Send, a collector compacts them.

    START -> begin --Send x K--> trajectory -> collect --Send x K--> trajectory -> collect ... -> END

Each trajectory is one task (several nodes per trajectory would advance in lockstep with the slowest
branch). The next round is fanned out straight from ``collect``: a separate controller node would cost
one more superstep (and checkpoint) per round. ``begin`` and ``collect`` return their Sends in a
``Command``: a router after them would read the whole state back (LangGraph copies every channel for it),
about 3% of the client's CPU at [32, 4].

State is plain JSON data, and each conclusion is stored once per problem: every trajectory's record
(conclusion and counts, never reasoning) is written by its task into ``trajectories``, a LangGraph
``DeltaChannel`` (a checkpoint keeps the writes, not the grown list again); a finished round adds a small
summary (its K, its slice of ``trajectories``, its reference order) to ``rounds``. A Send carries indices
only: a trajectory of round r+1 reads round r's conclusions from the run's in-process state, which the
collector fills, or the runner from the checkpoint on a resume. The conversation is not in state: it
comes with every run in the runtime context (:class:`~pacore_graph.graph.context.PaCoReContext`), so the
checkpoints of a chat thread do not grow with the chat.

Every node runs both ways: ``ainvoke`` under an async graph, ``invoke`` under a sync one (so a sync
checkpointer such as ``SqliteSaver`` works). Nodes are plain Runnables, not sync functions, because
LangGraph runs sync functions of an async graph through a thread pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Overwrite, Send

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.control import TrajectoryCut
from pacore_graph.coordination.ending import ending
from pacore_graph.coordination.references import References
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.explorers.protocol import Explorer, ModelOrExplorer, as_explorer
from pacore_graph.graph.compat import passes_on
from pacore_graph.graph.context import PaCoReContext, current_run
from pacore_graph.graph.exploration import Exploration, failure_data, with_failed_tokens
from pacore_graph.graph.run_state import RunState
from pacore_graph.records import (
    OutcomeData,
    RoundData,
    RoundRecord,
    RoundSummary,
    TrajectoryData,
    round_data_of,
    usable,
)
from pacore_graph.synthesis.context_window import with_model_context
from pacore_graph.synthesis.prompt import last_user_index, order_references


def _extend(current: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    """The ``DeltaChannel`` reducer: the writes' items appended in order (batching-invariant)."""
    return [*current, *(item for write in writes for item in write)]


class PaCoReState(TypedDict, total=False):
    round_index: int
    round_start: int  # where the current round's records begin in `trajectories`
    trajectories: Annotated[list[TrajectoryData], DeltaChannel(_extend)]  # every record of the run, stored once
    rounds: Annotated[list[RoundSummary], DeltaChannel(_extend)]  # one per finished round
    answer: AIMessage | None
    outcome: OutcomeData | None  # set when a coordination option chose the answer


class TrajectoryTask(TypedDict):
    """The Send argument: indices, never texts (the references come from the run's state)."""

    round_index: int
    index: int
    spent: NotRequired[int]  # completion tokens spent before this round (only with a token budget)


class _Step(Runnable[Any, Any]):
    """A node with a sync and an async body; no run of its own (LangGraph traces the task)."""

    def __init__(self, name: str, sync: Callable[..., Any], asynchronous: Callable[..., Any]):
        self.name = name
        self._sync = sync
        self._async = asynchronous

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self._sync(input, config or {})

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await self._async(input, config or {})


def build_pacore_graph(
    model_or_explorer: ModelOrExplorer,
    config: PaCoReConfig | None = None,
    *,
    limiter: ConcurrencyLimiter | None = None,
) -> StateGraph[PaCoReState, PaCoReContext, PaCoReState, PaCoReState]:
    """An uncompiled StateGraph running PaCoRe; compile with your own checkpointer.

    Run it with ``graph.invoke({}, config, context=PaCoReContext(messages=[...]))``. Output: ``answer``
    (an AIMessage); :func:`~pacore_graph.graph.runner.finished_rounds` reads the rounds (plain data, each
    with its records) from the output state. Resume a thread through
    :class:`~pacore_graph.graph.runner.PaCoReRunner` (``resume=True``): it gives a resumed round the conclusions
    it builds on.
    """
    # `config` is LangGraph's name for the RunnableConfig below; a server-reported context fits the prompts
    settings = with_model_context(config or PaCoReConfig(), model_or_explorer)
    explorer: Explorer = as_explorer(model_or_explorer, settings)
    reference_mode = settings.compat == "reference"
    passes = passes_on if reference_mode else usable  # which trajectories become references
    uncapped = explorer  # compat="reference": what a request refused as too long is retried with
    if reference_mode and settings.max_tokens is not None:
        uncapped = as_explorer(model_or_explorer, settings.model_copy(update={"max_tokens": None}))
    limiter = limiter or ConcurrencyLimiter(settings.max_concurrency)
    schedule = settings.schedule
    final_round = len(schedule) - 1

    def begin(state: PaCoReState, config: RunnableConfig) -> Command[Any]:
        """A new input starts at round 1, also on a thread that already ran (checkpointer, next turn)."""
        run = current_run()
        run.begin()
        if not run.messages:
            raise ValueError("the message list is empty: PaCoRe needs at least one user message")
        if len(schedule) > 1:
            last_user_index(run.messages)  # fail now, not after round 1 was paid for
        announce(run, 0)
        update = {
            "round_index": 0,
            "round_start": 0,
            "trajectories": Overwrite([]),
            "rounds": Overwrite([]),
            "answer": None,
            "outcome": None,
        }
        return Command(update=update, goto=fan_out(0, []))

    def announce(run: RunState, round_index: int) -> None:
        """The round is fanned out from this node's task, in this process (see RoundBarrier)."""
        run.fanned_out(round_index)
        k = schedule[round_index]
        run.emit({"event": "round_started", "round": round_index, "k": k, "rounds": len(schedule)})

    expect = getattr(explorer, "expect", None)  # optional (see Explorer): ChatExplorer opens connections

    async def admit(round_index: int) -> None:
        admission = await current_run().admit(limiter, round_index, schedule[round_index])
        if expect is not None:  # the requests of every round admitted on this loop, at most the limit
            await expect(min(admission.pending, limiter.limit))

    async def abegin(state: PaCoReState, config: RunnableConfig) -> Command[Any]:
        command = begin(state, config)
        await admit(0)
        return command

    async def acollect(state: PaCoReState, config: RunnableConfig) -> Command[Any]:
        command = collect(state, config)
        if command.goto:  # the round fanned out next
            await admit(command.update["round_index"])  # type: ignore[index]
        return command

    def fan_out(round_index: int, rounds: list[RoundData]) -> list[Send]:
        """The Send tasks of round ``round_index``, after the finished ``rounds``: indices only."""
        spent = spent_tokens(rounds) if settings.budget.tokens is not None else None
        sends = []
        for index in range(schedule[round_index]):
            task = TrajectoryTask(round_index=round_index, index=index)
            if spent is not None:
                task["spent"] = spent
            sends.append(Send("trajectory", task))
        return sends

    async def trajectory(task: TrajectoryTask, config: RunnableConfig) -> dict[str, Any]:
        """One trajectory, retried on transient failures; a final failure is recorded, or raised when the
        whole round failed (see :mod:`pacore_graph.graph.barrier`). Closing the run cancels it."""
        run = current_run()
        round_index, index = task["round_index"], task["index"]
        k = schedule[round_index]
        verifier = round_index == final_round and settings.final_selector == "verifier"
        template = settings.verifier_template if verifier else settings.template
        seen = run.references(round_index, index, k, settings)
        messages, barrier = run.round(round_index, k, seen.texts, settings, template)
        control = run.control(settings).round(round_index, k, task.get("spent", 0))
        final = round_index == final_round and not verifier  # a verifier's reply is not the answer: no streaming
        running = run.trajectory_started()
        barrier.start()
        slot = limiter.slot()
        exploration: Exploration | None = None
        stage = 0  # 1: its request is sent, 2: its response received (RunState.trajectory_ended)
        try:
            await slot.take()  # first: a trajectory still queued for its slot has built nothing of its own
            run.request_sent(round_index)
            stage = 1
            child = run.child_config(config, round_index, index, final)
            episode = EpisodeContext(round_index, index, final, child, run.payload, run.on_record, run.unobserved)
            exploration = Exploration(explorer, messages, episode, settings, uncapped=uncapped)
            work = exploration.explore(slot=slot)
            outcome = await (control.guard(index, work) if control.watching else work)
            stage = 2
            await run.response_received(round_index)  # requests still to send go first
        except (asyncio.CancelledError, GraphBubbleUp):  # an agent's interrupt goes to the caller, as is
            barrier.leave()
            raise
        except TrajectoryCut as cut:
            record = seen_references(TrajectoryData(round_index=round_index, index=index, cut=cut.reason), seen)
            if exploration is not None:
                record = with_failed_tokens(record, exploration.failed_tokens)
            record["attempts"] = exploration.attempts if exploration is not None else 0
            barrier.finish(record, False)
            run.emit({"event": "trajectory_cut", "round": round_index, "index": index, "reason": cut.reason})
            return {"trajectories": [record]}
        except Exception as exc:
            failure = exploration.failure(exc) if exploration is not None else failure_data(exc, round_index, index)
            record = seen_references(failure, seen)
            control.finished(record)
            run.emit({"event": "trajectory_failed", "round": round_index, "index": index, "error": record["error"]})
            if reference_mode:  # the reference pipeline carries on whatever failed
                barrier.finish(record, False)
            elif await barrier.fail(record):
                failed = round_record(round_index, k, barrier.records.values())
                raise RoundFailedError(failed, run.finished_before(round_index)) from exc
            return {"trajectories": [record]}
        finally:
            slot.drop()  # when no attempt ran (cut first); an attempt gives it back as it ends
            run.trajectory_ended(running, round_index, stage)  # nothing below awaits: close() has nothing left to stop
        record = seen_references(exploration.record(outcome), seen)
        control.finished(record)
        barrier.finish(record, passes(record))
        if run.trace is not None:
            outcome.extra.setdefault("round_index", round_index)
            outcome.extra.setdefault("index", index)
            run.trace.append(outcome)
        run.emit(
            {
                "event": "trajectory_finished",
                "round": round_index,
                "index": index,
                "completion_tokens": record["completion_tokens"],
                "truncated": record["truncated"],
            }
        )
        return {"trajectories": [record]}

    def collect(state: PaCoReState, config: RunnableConfig) -> Command[Any]:
        """Order and compact the round and fan out the next one; after the final round its one conclusion
        is the answer."""
        run = current_run()
        round_index = state["round_index"]
        stored = state.get("trajectories", [])
        start = state.get("round_start", 0)
        records = sorted(stored[start:], key=lambda record: record["index"])
        order = order_references([r.get("content_length", 0) for r in records], settings.seed, settings.reference_order)
        chosen = [records[position] for position in order if passes(records[position])]
        summary = RoundSummary(
            round_index=round_index,
            k=schedule[round_index],
            reference_order=[r["index"] for r in chosen],
            start=start,
            end=len(stored),
        )
        round_data = round_data_of(summary, stored)
        run.emit(
            {
                "event": "round_finished",
                "round": round_index,
                "k": round_data["k"],
                "completion_tokens": sum(r.get("completion_tokens", 0) for r in records),
                "failed": sum(1 for r in records if r.get("error") is not None),
                "cut": sum(1 for r in records if r.get("cut")),
            }
        )
        finished = [round_data_of(done, stored) for done in state.get("rounds", [])]
        end = ending(finished, round_data, chosen, run.control(settings), settings, final_round)
        if not chosen and end is None and not reference_mode:  # the reference pipeline carries on with none
            if run.ran(round_index):
                earlier = [RoundRecord.model_validate(data) for data in finished]
                raise RoundFailedError(RoundRecord.model_validate(round_data), earlier)
            # A resume reached the collector of a round that failed before (its trajectories ran elsewhere,
            # e.g. some saved with empty conclusions before a kill, the rest failed on the resume after it):
            # run the whole round again instead of raising the same error on every resume.
            run.emit({"event": "round_restarted", "round": round_index, "k": round_data["k"]})
            announce(run, round_index)
            return Command(
                update={"round_start": len(stored), "round_index": round_index}, goto=fan_out(round_index, finished)
            )
        run.round_finished(round_data)  # the next round's trajectories read their references from here
        update: dict[str, Any] = {"rounds": [summary], "round_start": len(stored), "round_index": round_index + 1}
        if end is not None:
            update.update(round_index=len(schedule), answer=answer_message(end.record), outcome=end.outcome)
            run.emit({"event": "run_ended", "round": round_index, **end.outcome})
        elif round_index == final_round:  # compat="reference": a failed final call answers ""
            update["answer"] = answer_message(chosen[0]) if chosen else AIMessage(content="", name="pacore")
        else:
            announce(run, round_index + 1)
            return Command(update=update, goto=fan_out(round_index + 1, [*finished, round_data]))
        return Command(update=update)

    builder = StateGraph(PaCoReState, context_schema=PaCoReContext)
    # async runs wait for the limiter to admit each round before it is fanned out (see concurrency/limiter.py)
    builder.add_node("begin", _Step("begin", begin, abegin), destinations=("trajectory",))
    builder.add_node("trajectory", _Step("trajectory", lambda task, cfg: run_sync(trajectory(task, cfg)), trajectory))
    builder.add_node("collect", _Step("collect", collect, acollect), destinations=("trajectory", END))
    builder.add_edge(START, "begin")
    builder.add_edge("trajectory", "collect")
    return builder


def spent_tokens(rounds: list[RoundData]) -> int:
    return sum(record.get("completion_tokens", 0) for data in rounds for record in data["trajectories"])


def seen_references(record: TrajectoryData, seen: References) -> TrajectoryData:
    """Records which earlier trajectories a trajectory saw, when an option chose them (subset, dedup)."""
    if seen.indices is not None:
        record["reference_indices"] = seen.indices
    if seen.counts is not None:
        record["reference_counts"] = seen.counts
    return record


def round_record(round_index: int, k: int, records: Iterable[TrajectoryData]) -> RoundRecord:
    trajectories = sorted(records, key=lambda record: record["index"])
    return RoundRecord.model_validate({"round_index": round_index, "k": k, "trajectories": trajectories})


def answer_message(record: TrajectoryData) -> AIMessage:
    """The final trajectory's conclusion and tool calls, under its model message's id (so a messages
    stream that already showed its tokens does not show it twice)."""
    return AIMessage(
        content=record.get("conclusion", ""),
        tool_calls=record.get("tool_calls") or [],
        name="pacore",
        id=record.get("message_id"),
    )
