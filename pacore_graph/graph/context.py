"""What a caller attaches to one run of the PaCoRe graph: LangGraph's runtime context (``context=``).

Why not ``configurable``: LangGraph Server checkpoints every ``configurable`` key, so a callable or a
list there makes every threaded run fail; and the conversation is already in the caller's own state or
checkpoint, so the PaCoRe graph's state need not hold it again (its checkpoints stay the same size
however long the chat grows). Nothing here is checkpointed: on a resume the caller passes the same
messages again, and the per-round message lists are rebuilt from them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackManager
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.runtime import get_runtime

from pacore_graph.concurrency.limiter import Admission, ConcurrencyLimiter
from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.control import RunControl
from pacore_graph.graph.barrier import RoundBarrier
from pacore_graph.records import Trajectory
from pacore_graph.synthesis.context_window import fit_references
from pacore_graph.synthesis.prompt import synthesis_messages


@dataclass
class PaCoReContext:
    """The runtime context of one PaCoRe run (``graph.invoke(input, config, context=PaCoReContext(...))``).

    - ``messages``: the conversation PaCoRe answers (round 1 sends it unchanged).
    - ``payload``: handed to every explorer as ``EpisodeContext.payload`` (e.g. a SWE task row).
    - ``on_event``: receives progress events; without one they go to the graph's ``custom`` stream.
    - ``on_record``: receives what explorers pass to ``EpisodeContext.record`` (episode records).
    - ``trace``: a list that receives every full :class:`Trajectory`, reasoning included.
    - ``stream_metadata``: the enclosing graph node's ``langgraph_*`` run metadata. Model calls carry it
      so that ``stream_mode="messages"`` of the enclosing graph shows the final round's tokens as that
      node's, as it would for a plain model call in its place.
    - ``unobserved``: no callback handler is attached to this run (see :func:`unobserved`); passed on to
      every episode, so a chat explorer skips chat-model runs nobody would see.
    """

    messages: Sequence[BaseMessage]
    payload: Any = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_record: Callable[[Any], None] | None = None
    trace: list[Trajectory] | None = None
    stream_metadata: dict[str, Any] = field(default_factory=dict)
    unobserved: bool = False
    started: float = field(default_factory=time.monotonic)  # a budget's deadline counts from here
    _rounds: dict[int, tuple[dict[tuple[str, ...], list[BaseMessage]], RoundBarrier]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _control: RunControl | None = field(default=None, init=False, repr=False, compare=False)
    _fanned_out: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    _in_flight: set[asyncio.Task] = field(default_factory=set, init=False, repr=False, compare=False)
    _admission: Admission | None = field(default=None, init=False, repr=False, compare=False)
    _admitted: int = field(default=0, init=False, repr=False, compare=False)  # admitted here, not finished
    _admitted_rounds: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    _closed: bool = field(default=False, init=False, repr=False, compare=False)

    def trajectory_started(self) -> asyncio.Task:
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

    def trajectory_ended(self, task: asyncio.Task, round_index: int) -> None:
        self._in_flight.discard(task)
        if self._admitted and round_index in self._admitted_rounds and not self._closed:
            self._admitted -= 1
            self._admission.finished()  # type: ignore[union-attr]

    async def admit(self, limiter: ConcurrencyLimiter, round_index: int, k: int) -> None:
        """Wait until the run-wide limiter admits this round's K trajectories (see ConcurrencyLimiter.admit)."""
        self._admission = await limiter.admit(k)
        self._admitted += k
        self._admitted_rounds.add(round_index)

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
        if self._admitted:  # admitted trajectories that will not finish here (never started, or cancelled)
            self._admission.finished(self._admitted)  # type: ignore[union-attr]
            self._admitted = 0
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
        self._control = None
        self._fanned_out.clear()

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


def unobserved(config: RunnableConfig | None) -> bool:
    """Whether no callback handler would see a run under ``config``: none among its callbacks and none
    from the environment or context (LangSmith tracing, ``collect_runs``, debug, configure hooks), as
    LangChain configures them. Asked once per PaCoRe run: its model calls inherit the same handlers
    (``stream_mode="messages"`` and ``astream_events`` attach theirs to the run's callbacks)."""
    callbacks = (config or {}).get("callbacks")
    return not AsyncCallbackManager.configure(callbacks, None, False).handlers


def current_context() -> PaCoReContext:
    """The context of the PaCoRe run this node belongs to; a clear error when the caller passed none."""
    context = get_runtime().context
    if not isinstance(context, PaCoReContext):
        raise TypeError(
            "the PaCoRe graph reads its conversation from its runtime context: invoke it with "
            "context=PaCoReContext(messages=[...]) (PaCoReNode and PaCoReRunner do this for you)"
        )
    return context
