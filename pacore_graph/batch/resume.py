"""Resume a PaCoRe run after a kill: one SQLite checkpoint file per output folder, one thread per problem.

Why: a PaCoRe problem costs many trajectories; a run killed mid-problem must not redo the ones that had
finished. LangGraph saves each finished Send task's write (a "pending write") as the task ends, so
invoking the same thread again with input ``None`` runs only the tasks that had not finished (measured
on langgraph 1.2 with SIGKILL mid-superstep: finished trajectories were not called again).

Rules this module follows:
- the thread id holds a digest of the problem's messages and of every config field that changes what
  is sent, so a changed schedule, template or problem starts afresh instead of resuming a stale state;
- a thread whose graph finished is read back, not run again (the kill came before its row was written);
- a thread that stopped on :class:`RoundFailedError` (every trajectory of a round failed, e.g. the
  server was down) is resumed like any other: the failed trajectories raised, so LangGraph runs them
  again, while the earlier rounds (and any trajectory of the round that did finish) are kept; when the
  collector raised it (the round's usable-less trajectories finished partly before a restart), the
  resume reaches only the collector, which then runs the whole round again;
- durability "sync": a checkpoint is on disk before the next step starts.

Trajectories traced with ``trace=True`` are kept in memory only: after a resume the trace holds the
trajectories of this process. The graph state is plain JSON data, read back under the strict serializer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from pacore_graph.config import PaCoReConfig
from pacore_graph.graph.own_thread import conversation_digest
from pacore_graph.graph.run_state import ProgressListener, RecordSink
from pacore_graph.graph.runner import MessagesInput, PaCoReRunner, build_result
from pacore_graph.records import PaCoReResult

CHECKPOINT_FILE = "checkpoints.sqlite"
# Config fields that do not change what a run sends: a resume may change them freely.
RUNTIME_FIELDS = {"max_concurrency", "retry", "request_timeout", "stream", "spaced_gc", "answer_records"}

# Part of every thread id: checkpoints of an older graph shape (other node names) start afresh.
GRAPH_SHAPE = "begin-trajectory-collect/records-once"

Status = Literal["fresh", "resumed", "finished", "retried"]


def checkpoint_serde() -> JsonPlusSerializer:
    """Strict: only LangGraph's safe types (messages, plain data) are read back; nothing else is in state."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


@asynccontextmanager
async def open_checkpointer(folder: str | Path) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """An AsyncSqliteSaver on ``folder/checkpoints.sqlite`` (created if missing), closed on exit."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    async with aiosqlite.connect(str(folder / CHECKPOINT_FILE)) as connection:
        saver = AsyncSqliteSaver(connection, serde=checkpoint_serde())
        await saver.setup()
        yield saver


def thread_id(problem_id: str, messages: Sequence[BaseMessage], config: PaCoReConfig, *salt: str) -> str:
    """``problem_id`` plus a digest of what the run sends (messages, schedule, sampling, template, salt)."""
    sent = config.model_dump(mode="json", exclude=RUNTIME_FIELDS)
    return f"{problem_id}:{conversation_digest(messages, GRAPH_SHAPE, sent, list(salt))}"


def _failed_round(snapshot: Any) -> bool:
    """Whether the thread stopped because a round had no usable trajectory: its trajectory tasks raised, or
    its collector did."""
    return any(task.name in ("trajectory", "collect") and task.error is not None for task in snapshot.tasks)


async def thread_status(runner: PaCoReRunner, thread: str) -> tuple[Status, PaCoReResult | None]:
    """Where thread ``thread`` stands: ``finished`` (with its result), ``retried`` (a round failed and will be
    run again), ``resumed`` (interrupted), or ``fresh`` (nothing saved)."""
    snapshot = await runner.graph.aget_state({"configurable": {"thread_id": thread}})
    if not snapshot.next and snapshot.values.get("answer") is not None:
        return "finished", build_result(snapshot.values)
    if not snapshot.next:
        return "fresh", None
    return ("retried" if _failed_round(snapshot) else "resumed"), None


async def solve_resumable(
    runner: PaCoReRunner,
    messages: MessagesInput,
    thread: str,
    *,
    trace: bool = False,
    on_event: ProgressListener | None = None,
    payload: Any = None,
    on_record: RecordSink | None = None,
) -> tuple[PaCoReResult, Status]:
    """Run PaCoRe for one problem on checkpoint thread ``thread``, resuming whatever it had done.

    ``runner`` must be compiled with a checkpointer (see :func:`open_checkpointer`). ``trace``, ``on_event``,
    ``payload``, ``on_record`` are :meth:`PaCoReRunner.arun`'s, given again on every resume (none of them is
    checkpointed).
    """
    status, finished = await thread_status(runner, thread)
    if finished is not None:
        return finished, status
    on_thread: RunnableConfig = {"configurable": {"thread_id": thread}}
    result = await runner.arun(
        messages,
        on_thread,
        resume=status != "fresh",
        durability="sync",
        trace=trace,
        on_event=on_event,
        payload=payload,
        on_record=on_record,
    )
    return result, status
