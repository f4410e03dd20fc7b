"""What the operator keeps while one run goes: its finished rounds (the next round's references come from
them, not from the Send arguments), its rounds' barriers and message lists, its coordination state, the
trajectories in flight and the admission they hold, whether it was closed.

Internal: a caller passes a :class:`~pacore_graph.graph.context.PaCoReContext` (frozen) and each holds one of
these (see that module for why there). The context's fields are copied in once: they cannot change, and a
trajectory then reads them in one attribute access each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM

from pacore_graph.concurrency.limiter import ConcurrencyLimiter, RoundTicket
from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.control import RunControl
from pacore_graph.coordination.references import References, next_round_references
from pacore_graph.graph.barrier import RoundBarrier
from pacore_graph.records import RoundData, RoundRecord, Trajectory
from pacore_graph.synthesis.context_window import fit_references
from pacore_graph.synthesis.prompt import synthesis_messages

if TYPE_CHECKING:
    from pacore_graph.graph.context import PaCoReContext, ProgressListener, RecordSink


class RunState:
    """The per-run state of the operator for one :class:`~pacore_graph.graph.context.PaCoReContext`."""

    __slots__ = (
        "messages",
        "payload",
        "on_event",
        "on_record",
        "trace",
        "stream_metadata",
        "unobserved",
        "started",
        "_rounds",
        "_finished",
        "_references",
        "_control",
        "_fanned_out",
        "_in_flight",
        "_tickets",
        "_closed",
    )

    def __init__(self, context: PaCoReContext):
        self.messages: Sequence[BaseMessage] = context.messages
        self.payload: Any = context.payload
        self.on_event: ProgressListener | None = context.on_event
        self.on_record: RecordSink | None = context.on_record
        self.trace: list[Trajectory] | None = context.trace
        self.stream_metadata: Mapping[str, Any] = context.stream_metadata
        self.unobserved: bool = context.unobserved
        self.started = time.monotonic()  # a budget's deadline counts from here
        self._rounds: dict[int, tuple[dict[tuple[str, ...], list[BaseMessage]], RoundBarrier]] = {}
        self._finished: dict[int, RoundData] = {}
        self._references: dict[int, list[References]] = {}
        self._control: RunControl | None = None
        self._fanned_out: set[int] = set()
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._tickets: dict[int, RoundTicket] = {}  # the admission of each round this run fanned out
        self._closed = False

    def trajectory_started(self) -> asyncio.Task[Any]:
        """The current task runs one trajectory of this run until :meth:`trajectory_ended` (see :meth:`close`).

        A trajectory that starts after the run was closed (LangGraph had created its task but its cleanup
        was cut short) is cancelled at once, before it sends anything.
        """
        task = asyncio.current_task()
        assert task is not None, "a trajectory runs in an asyncio task"
        self._in_flight.add(task)
        if self._closed:  # checked after adding, so close() in another thread cannot miss this task
            self._in_flight.discard(task)
            raise asyncio.CancelledError("the PaCoRe run was closed before this trajectory started")
        return task

    def trajectory_ended(self, task: asyncio.Task[Any]) -> None:
        self._in_flight.discard(task)

    async def admit(self, limiter: ConcurrencyLimiter, round_index: int, k: int) -> RoundTicket:
        """Wait until the run-wide limiter admits this round's K trajectories (see concurrency/limiter.py)."""
        ticket = await limiter.admit(k)
        earlier = self._tickets.get(round_index)  # a round run again (after a resume): its first run is over
        if earlier is not None:
            earlier.give_back_rest()
        self._tickets[round_index] = ticket
        if self._closed:  # closed while it waited: nothing of this run will take it
            ticket.give_back_rest()
        return ticket

    def ticket(self, round_index: int) -> RoundTicket | None:
        """The round's admission, when this run admitted it (async runs); each trajectory gives back its share."""
        return self._tickets.get(round_index)

    def close(self) -> None:
        """The run is over (finished, failed or cancelled): cancel every trajectory still running.

        Why here and not only in LangGraph's cleanup: a run cancelled a second time one loop step after
        the first (Starlette does that when a client leaves) never runs LangGraph's cleanup (its exit task
        is cancelled before it starts; langgraph issue 5682), which would leave the trajectories' HTTP
        requests open upstream. The runner calls this in its own ``finally``; it is synchronous, so no
        further cancellation can interrupt it. A sync run's trajectories run on the background loop of
        :mod:`pacore_graph.concurrency.sync`: they are cancelled through their own loop.
        """
        self._closed = True
        for ticket in self._tickets.values():  # admitted trajectories that will not finish here
            ticket.give_back_rest()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for task in tuple(self._in_flight):
            loop = task.get_loop()
            if loop is running:
                task.cancel()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)

    def begin(self) -> None:
        """A new input starts a run on this context: what an earlier run left on it (its rounds' barriers and
        message lists, its early-stop and budget state) is dropped, so a context may be reused; its budget's
        deadline then counts from now. A resume does not begin: it keeps what the interrupted run left."""
        if self._rounds or self._control is not None or self._fanned_out:
            self.started = time.monotonic()
        self._rounds.clear()
        self._finished.clear()
        self._references.clear()
        self._control = None
        self._fanned_out.clear()
        for ticket in self._tickets.values():  # an earlier run on this context gave back all it held as it closed
            ticket.give_back_rest()
        self._tickets.clear()

    def round_finished(self, data: RoundData) -> None:
        """A finished round (from the collector, or from the checkpoint when a run resumes in a new process)."""
        self._finished[data["round_index"]] = data

    def finished_before(self, round_index: int) -> list[RoundRecord]:
        """The rounds finished before ``round_index``, as records (what a failure of that round reports)."""
        finished = self._finished
        return [RoundRecord.model_validate(finished[number]) for number in sorted(finished) if number < round_index]

    def references(self, round_index: int, index: int, k: int, settings: PaCoReConfig) -> References:
        """What trajectory ``index`` of round ``round_index`` sees of the round before (nothing in round 1),
        worked out once per round."""
        lists = self._references.get(round_index)
        if lists is None:
            previous = self._finished.get(round_index - 1) if round_index > 0 else None
            if round_index > 0 and previous is None:
                raise RuntimeError(
                    f"round {round_index + 1} is resumed without round {round_index}'s conclusions: resume the "
                    "PaCoRe graph through PaCoReRunner, PaCoReNode or PaCoReChatModel (they read them from the "
                    "checkpoint)"
                )
            lists = self._references[round_index] = next_round_references(previous, k, round_index, settings)
        return lists[index]

    def fanned_out(self, round_index: int) -> None:
        """This process sends the round's K tasks: all of them will run here (see RoundBarrier)."""
        self._fanned_out.add(round_index)

    def ran(self, round_index: int) -> bool:
        """Whether a trajectory of the round ran in this process (a resume may reach only its collector)."""
        return round_index in self._rounds

    def emit(self, event: dict[str, Any]) -> None:
        """A progress event to the listener, else to LangGraph's custom stream (about 0.2 ms an event)."""
        if self.on_event is not None:
            self.on_event(event)
            return
        try:
            get_stream_writer()(event)
        except RuntimeError:  # called outside a graph run
            pass

    def round(
        self, round_index: int, k: int, references: Sequence[str], settings: PaCoReConfig, template: str
    ) -> tuple[list[BaseMessage], RoundBarrier]:
        """The messages for ``references`` (one list shared by the trajectories that see the same ones: all
        K of a round unless each sees its own subset) and the round's barrier, made on first use."""
        entry = self._rounds.get(round_index)
        if entry is None:
            entry = self._rounds[round_index] = ({}, RoundBarrier(k, round_index in self._fanned_out))
        by_references, barrier = entry
        key = tuple(references)
        messages = by_references.get(key)
        if messages is None:
            messages = list(self.messages)
            if round_index > 0:
                fitted = fit_references(references, messages, settings, template)
                messages = synthesis_messages(messages, fitted, template)
            by_references[key] = messages
        return messages, barrier

    def control(self, settings: PaCoReConfig) -> RunControl:
        """The run's coordination state (budgets, early stop), made on first use."""
        if self._control is None:
            self._control = RunControl(
                settings.budget, settings.early_stop, settings.answer_extractor, self.started, self.emit
            )
        return self._control

    def child_config(self, node_config: RunnableConfig, round_index: int, index: int, final: bool) -> RunnableConfig:
        """The config of one trajectory's model call or agent run: traced under the trajectory's task,
        tagged with its round and index; only the final round may stream tokens. The nostream tag is for
        handlers (LangGraph's messages stream is one): a run none sees goes without, which spares every
        call's callback configuration a tag merge (about 5 us)."""
        config: RunnableConfig = {
            "callbacks": node_config.get("callbacks"),
            "metadata": {**self.stream_metadata, "pacore_round": round_index, "pacore_index": index},
        }
        if not final and not self.unobserved:
            config["tags"] = [TAG_NOSTREAM]
        return config
