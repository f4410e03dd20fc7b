"""What a caller attaches to one run of the PaCoRe graph: LangGraph's runtime context (``context=``).

Why not ``configurable``: LangGraph Server checkpoints every ``configurable`` key, so a callable or a
list there makes every threaded run fail; and the conversation is already in the caller's own state or
checkpoint, so the PaCoRe graph's state need not hold it again (its checkpoints stay the same size
however long the chat grows). Nothing here is checkpointed: on a resume the caller passes the same
messages again, and the per-round message lists are rebuilt from them.

Two objects, one per side of the run:

- :class:`PaCoReContext`, frozen, is the caller's input: the conversation and where the run's outputs go.
- :class:`~pacore_graph.graph.run_state.RunState` is what the operator keeps while the run goes: its rounds
  (each one's barrier, admission, references and message lists), the early-stop and budget state, the
  trajectories in flight, whether the run was closed.

Where the run state lives: LangGraph hands every node the very object passed as ``context=`` (the runtime
context is not copied), and nothing else of the run reaches a Send task (no run id, only its argument). So the
context holds its run's state from its construction (``run_state``: not one of its fields, so equality and repr
are those of the caller's input alone). One context runs one graph run at a time: a new input resets its run
state (:meth:`RunState.begin`), so a context may be used again afterwards, but two runs at once need a context
each (``PaCoReRunner`` makes one per run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackManager
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langgraph.runtime import get_runtime

from pacore_graph.graph.reuse_pool import ReusePool
from pacore_graph.graph.run_state import ProgressListener, RecordSink, RunState
from pacore_graph.records import Trajectory


@dataclass(frozen=True)
class PaCoReContext:
    """The input of one PaCoRe run (``graph.invoke(input, runnable_config, context=PaCoReContext(messages=[...]))``).

    - ``messages``: the conversation PaCoRe answers (round 1 sends it unchanged; it is read, never changed).
    - ``payload``: handed to every explorer as ``EpisodeContext.payload`` (e.g. a SWE task row).
    - ``on_event``: receives progress events; without one they go to the graph's ``custom`` stream.
    - ``on_record``: receives what explorers pass to ``EpisodeContext.record`` (episode records).
    - ``trace``: a list that receives every full :class:`Trajectory`, reasoning included.
    - ``stream_metadata``: the enclosing graph node's ``langgraph_*`` run metadata. Model calls carry it
      so that ``stream_mode="messages"`` of the enclosing graph shows the final round's tokens as that
      node's, as it would for a plain model call in its place.
    - ``unobserved``: no callback handler is attached to this run (see :func:`unobserved`); passed on to
      every episode, so a chat explorer skips chat-model runs nobody would see.
    - ``reuse``: an earlier result's trajectories, taken instead of sending the same requests again (escalation:
      :mod:`pacore_graph.graph.reuse`).

    Frozen: a run reads these and never changes them. What the operator keeps during the run is not here
    but in ``run_state``, made with the context (see the module's docstring).
    """

    messages: Sequence[BaseMessage]
    payload: Any = None
    on_event: ProgressListener | None = None
    on_record: RecordSink | None = None
    trace: list[Trajectory] | None = None
    stream_metadata: Mapping[str, Any] = field(default_factory=dict)
    unobserved: bool = False
    reuse: ReusePool | None = None
    run_state: RunState = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        run = RunState(
            self.messages,
            payload=self.payload,
            on_event=self.on_event,
            on_record=self.on_record,
            trace=self.trace,
            stream_metadata=self.stream_metadata,
            unobserved=self.unobserved,
            reuse=self.reuse,
        )
        object.__setattr__(self, "run_state", run)  # a frozen dataclass sets its own derived field this way


def current_run() -> RunState:
    """The state of the PaCoRe run this node belongs to; a clear error when the caller passed no context."""
    context = get_runtime().context
    if not isinstance(context, PaCoReContext):
        raise TypeError(
            "the PaCoRe graph reads its conversation from its runtime context: invoke it with "
            "context=PaCoReContext(messages=[...]) (PaCoReNode and PaCoReRunner do this for you)"
        )
    return context.run_state


def unobserved(runnable_config: RunnableConfig | None) -> bool:
    """Whether no callback handler would see a run under ``runnable_config``: none among its callbacks and none
    from the environment or context (LangSmith tracing, ``collect_runs``, debug, configure hooks), as
    LangChain configures them. Asked once per PaCoRe run: its model calls inherit the same handlers
    (``stream_mode="messages"`` and ``astream_events`` attach theirs to the run's callbacks). The ambient
    config counts too: LangGraph merges its callbacks into the run's."""
    return not any(
        AsyncCallbackManager.configure((source or {}).get("callbacks"), None, False).handlers
        for source in (runnable_config, ensure_config())  # ensure_config(): a copy of the ambient config
    )
