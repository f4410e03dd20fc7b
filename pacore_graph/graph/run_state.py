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

from pacore_graph.concurrency.limiter import Admission, ConcurrencyLimiter
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
        "messages", "payload", "on_event", "on_record", "trace", "stream_metadata", "unobserved", "started",
        "_rounds", "_finished", "_references", "_control", "_fanned_out", "_in_flight", "_admission", "_admitted",
        "_unsent", "_admitted_rounds",
        "_closed",
    )  # fmt: skip

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
        self._admission: Admission | None = None
        self._admitted = 0  # admitted here, not finished
        self._unsent = 0  # admitted here, request not sent
        self._admitted_rounds: set[int] = set()
        self._closed = False

    def trajectory_started(self) -> asyncio.Task[Any]:
        """The current task runs one trajectory of this run until :meth:`trajectory_ended` (see :meth:`close`);
        call that in a ``finally``. (A pair of calls, not a context manager: one object fewer per trajectory.)

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

    def request_sent(self, round_index: int) -> None:
        """The trajectory holds its slot and sends its request now (Admission.send_first waits for this)."""
        admission = self._holding(round_index)
        if admission is not None and self._unsent:
            self._unsent -= 1
            admission.sent()

    async def response_received(self, round_index: int) -> None:
        """The trajectory's request is over: its admission goes back at once (a round waiting for it fans out),
        and its digest waits while the trajectories admitted so far still have requests to send."""
        admission = self._give_back(round_index)
        if admission is not None:
            await admission.send_first()

    def trajectory_ended(self, task: asyncio.Task[Any], round_index: int, stage: int) -> None:
        """``stage``: 0 before its request was sent, 1 before its response was received, 2 after."""
        self._in_flight.discard(task)
        if stage == 0:
            self.request_sent(round_index)  # it never will be
        if stage < 2:
            self._give_back(round_index)

    def _holding(self, round_index: int) -> Admission | None:
        """The admission the round holds when this run admitted it and goes on (close() gives back the rest)."""
        admission = self._admission
        if admission is None or round_index not in self._admitted_rounds or self._closed:
            return None
        return admission

    def _give_back(self, round_index: int) -> Admission | None:
        admission = self._holding(round_index)
        if admission is None or not self._admitted:
            return None
        self._admitted -= 1
        admission.finished()
        return admission

    async def admit(self, limiter: ConcurrencyLimiter, round_index: int, k: int) -> Admission:
        """Wait until the run-wide limiter admits this round's K trajectories (see ConcurrencyLimiter.admit)."""
        self._admission = admission = await limiter.admit(k)
        self._admitted += k
        self._unsent += k
        self._admitted_rounds.add(round_index)
        return admission

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
        if self._admission is not None:  # admitted ones that will not finish (or send) here
            if self._admitted:
                self._admission.finished(self._admitted)
                self._admitted = 0
            if self._unsent:
                self._admission.sent(self._unsent)
                self._unsent = 0
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

    def round_finished(self, data: RoundData) -> None:
        """A finished round (from the collector, or from the checkpoint when a run resumes in a new process)."""
        self._finished[data["round_index"]] = data

    def finished_before(self, round_index: int) -> list[RoundRecord]:
        """The rounds finished before ``round_index``, as records (what a failure of that round reports)."""
        return [RoundRecord.model_validate(self._finished[number]) for number in sorted(self._finished)
                if number < round_index]  # fmt: skip

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
                )  # fmt: skip
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
        tagged with its round and index; only the final round may stream tokens."""
        config: RunnableConfig = {
            "callbacks": node_config.get("callbacks"),
            "metadata": {**self.stream_metadata, "pacore_round": round_index, "pacore_index": index},
        }
        if not final:
            config["tags"] = [TAG_NOSTREAM]
        return config
