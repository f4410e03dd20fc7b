"""What the operator keeps while one run goes: :class:`RunState`, and in it one :class:`Round` per round.

A :class:`~pacore_graph.graph.context.PaCoReContext` (the caller's input, frozen) holds one of these from its
construction: LangGraph hands every node that very object, so every node and trajectory reaches the run's state
through it. The context's fields are copied in once: they cannot change, and a trajectory then reads them in one
attribute access each. This module imports nothing of the context's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

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
    from pacore_graph.graph.reuse_pool import ReusePool, RoundPlan

ProgressListener: TypeAlias = Callable[[dict[str, Any]], None]  # progress events: round started, trajectory finished...
RecordSink: TypeAlias = Callable[[Any], None]  # receives what explorers pass to EpisodeContext.record


class Round:
    """One round of one run, as this process sees it.

    - ``k``, and ``barrier``: how a failed trajectory of it decides (graph/barrier.py). Whoever makes the round says
      how many of its trajectories run here: all K when this process fans it out, the unfinished ones when a run
      resumes it from a checkpoint, or (a graph resumed without the runner) unknown.
    - ``ticket``: its admission under the run-wide limiter (async runs that fanned it out; None otherwise).
    - ``data``: once it is finished, its records (from the collector, or from the checkpoint on a resume): the
      next round's references come from here.
    - what each trajectory sees (:meth:`references`, worked out once) and the message lists built over it (one
      per distinct list of references and window: all K share one unless each sees its own subset, or a panel's
      models have windows of their own).
    """

    __slots__ = ("index", "k", "barrier", "ticket", "data", "plan", "_references", "_messages")

    def __init__(self, index: int, k: int, here: int | None):
        self.index = index
        self.k = k
        self.barrier = RoundBarrier(k, here)
        self.ticket: RoundTicket | None = None
        self.data: RoundData | None = None
        self.plan: RoundPlan | None = None  # its requests and what it reuses (graph/reuse.py), worked out once
        self._references: list[References] | None = None
        self._messages: dict[tuple[Any, ...], list[BaseMessage]] = {}

    @property
    def ran(self) -> bool:
        """Whether a trajectory of this round started in this process (a resume may reach only its collector)."""
        return self.barrier.started > 0

    def references(self, index: int, previous: Round | None, config: PaCoReConfig) -> References:
        """What trajectory ``index`` sees of the round before (``previous``; None for round 1)."""
        if self._references is None:
            if self.index > 0 and (previous is None or previous.data is None):
                raise RuntimeError(
                    f"round {self.index + 1} is resumed without round {self.index}'s conclusions: resume the "
                    "PaCoRe graph through PaCoReRunner, PaCoReNode or PaCoReChatModel (they read them from the "
                    "checkpoint)"
                )
            data = previous.data if previous is not None else None
            self._references = next_round_references(data, self.k, self.index, config)
        return self._references[index]

    def messages(
        self, references: Sequence[str], conversation: Sequence[BaseMessage], config: PaCoReConfig, template: str
    ) -> list[BaseMessage]:
        """The messages a trajectory that sees ``references`` sends: round 1 the conversation, later rounds the
        paper's template over the references (fitted to the model's window) in place of the last user message.
        A panel's models may each have their own window: one list per window and reply cap."""
        key = (config.context_window, config.max_tokens, *references)
        messages = self._messages.get(key)
        if messages is None:
            messages = list(conversation)
            if self.index > 0:
                fitted = fit_references(references, messages, config, template)
                messages = synthesis_messages(messages, fitted, template)
            self._messages[key] = messages
        return messages

    def give_back_admission(self) -> None:
        """What the round's admitted trajectories still hold goes back (they will not run, or not here)."""
        if self.ticket is not None:
            self.ticket.give_back_rest()


class RunState:
    """The per-run state of the operator: the rounds, the coordination state, the trajectories in flight."""

    __slots__ = (
        "messages",
        "payload",
        "on_event",
        "on_record",
        "trace",
        "stream_metadata",
        "unobserved",
        "reuse",
        "started",
        "rounds",
        "_control",
        "_in_flight",
        "_closed",
    )

    def __init__(
        self,
        messages: Sequence[BaseMessage],
        *,
        payload: Any = None,
        on_event: ProgressListener | None = None,
        on_record: RecordSink | None = None,
        trace: list[Trajectory] | None = None,
        stream_metadata: Mapping[str, Any] | None = None,
        unobserved: bool = False,
        reuse: ReusePool | None = None,
    ):
        self.messages = messages
        self.payload = payload
        self.on_event = on_event
        self.on_record = on_record
        self.trace = trace
        self.stream_metadata: Mapping[str, Any] = stream_metadata or {}
        self.unobserved = unobserved
        self.reuse = reuse  # an earlier result's trajectories this run may take instead of sending
        self.started = time.monotonic()  # a budget's deadline counts from here
        self.rounds: dict[int, Round] = {}
        self._control: RunControl | None = None
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._closed = False

    # ---- the rounds -------------------------------------------------------------------------------

    def round(self, index: int, k: int) -> Round:
        """Round ``index`` of ``k`` trajectories, made on first use when nobody said how many of them run here
        (a graph resumed without the runner)."""
        found = self.rounds.get(index)
        if found is None:
            found = self.rounds[index] = Round(index, k, None)
        return found

    def fan_out(self, index: int, k: int) -> Round:
        """This process sends round ``index``'s K tasks: all of them will run here (a round run again, after a
        resume, starts afresh: what its earlier run was admitted with goes back)."""
        return self._new_round(index, k, k)

    def resume(self, index: int, k: int, unfinished: int) -> None:
        """A checkpoint's round ``index`` goes on in this process with its ``unfinished`` trajectories (the rest
        finished before the restart, their records saved)."""
        self._new_round(index, k, unfinished)

    def _new_round(self, index: int, k: int, here: int) -> Round:
        earlier = self.rounds.get(index)
        if earlier is not None:
            earlier.give_back_admission()
        made = self.rounds[index] = Round(index, k, here)
        return made

    def finished(self, data: RoundData) -> None:
        """A finished round (from the collector, or from the checkpoint when a run resumes in a new process)."""
        self.round(data["round_index"], data["k"]).data = data

    def finished_before(self, index: int) -> list[RoundRecord]:
        """The rounds finished before round ``index``, as records (what a failure of that round reports)."""
        done = sorted((number, found.data) for number, found in self.rounds.items() if found.data is not None)
        return [RoundRecord.model_validate(data) for number, data in done if number < index]

    async def admit(self, limiter: ConcurrencyLimiter, index: int, k: int) -> RoundTicket:
        """Wait until the run-wide limiter admits round ``index`` (see concurrency/limiter.py); its trajectories
        each give back their share of the ticket."""
        ticket = await limiter.admit(k)
        admitted = self.round(index, k)
        admitted.give_back_admission()  # a round admitted again (after a resume): its first run is over
        admitted.ticket = ticket
        if self._closed:  # closed while it waited: nothing of this run will take it
            ticket.give_back_rest()
        return ticket

    # ---- the run ----------------------------------------------------------------------------------

    def begin(self) -> None:
        """A new input starts a run on this state: what an earlier run left (its rounds, its early-stop and budget
        state) is dropped, so a context may be reused; its budget's deadline then counts from now. A resume does
        not begin: it keeps what the interrupted run left."""
        self.started = time.monotonic()
        for left in self.rounds.values():  # an earlier run on this context gave back all it held as it closed
            left.give_back_admission()
        self.rounds.clear()
        self._control = None

    def control(self, config: PaCoReConfig) -> RunControl:
        """The run's coordination state (budgets, early stop), made on first use."""
        if self._control is None:
            self._control = RunControl(
                config.budget, config.early_stop, config.answer_extractor, self.started, self.emit
            )
        return self._control

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
        for left in self.rounds.values():  # admitted trajectories that will not finish here
            left.give_back_admission()
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

    def emit(self, event: dict[str, Any]) -> None:
        """A progress event to the listener, else to LangGraph's custom stream (about 0.2 ms an event)."""
        if self.on_event is not None:
            self.on_event(event)
            return
        try:
            get_stream_writer()(event)
        except RuntimeError:  # called outside a graph run
            pass

    def child_config(
        self, runnable_config: RunnableConfig, round_index: int, index: int, final: bool
    ) -> RunnableConfig:
        """The RunnableConfig of one trajectory's model call or agent run, from its task's: traced under the
        trajectory's task, tagged with its round and index; only the final round may stream tokens. The nostream tag
        is for handlers (LangGraph's messages stream is one): a run none sees goes without, which spares every
        call's callback configuration a tag merge (about 5 us)."""
        child: RunnableConfig = {
            "callbacks": runnable_config.get("callbacks"),
            "metadata": {**self.stream_metadata, "pacore_round": round_index, "pacore_index": index},
        }
        if not final and not self.unobserved:
            child["tags"] = [TAG_NOSTREAM]
        return child
