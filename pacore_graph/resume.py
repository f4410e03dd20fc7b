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
  server was down) is forked from the checkpoint before that round, so the round is tried again
  while the earlier rounds are kept;
- durability "sync": a checkpoint is on disk before the next step starts.

Trajectories traced with ``trace=True`` are kept in memory only: after a resume the trace holds the
trajectories of this process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import BaseMessage, convert_to_openai_messages
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import RoundFailedError
from pacore_graph.gc_policy import spaced_full_collections
from pacore_graph.records import PaCoReResult, Trajectory
from pacore_graph.run import MessagesInput, PaCoReRunner, build_result, to_messages, with_listeners

CHECKPOINT_FILE = "checkpoints.sqlite"
# Our own types in the graph state; LangGraph warns on (and will block) unlisted types when reading back.
STATE_TYPES = [
    ("pacore_graph.records", "TrajectoryRecord"),
    ("pacore_graph.records", "RoundRecord"),
    ("pacore_graph.records", "Trajectory"),
]
# Config fields that do not change what a run sends: a resume may change them freely.
RUNTIME_FIELDS = {"max_concurrency", "retry", "request_timeout", "stream", "spaced_gc"}

# Part of every thread id: checkpoints of an older graph shape (other node names) start afresh.
GRAPH_SHAPE = "begin-trajectory-collect"

Status = Literal["fresh", "resumed", "finished", "retried"]


def checkpoint_serde() -> JsonPlusSerializer:
    return JsonPlusSerializer(allowed_msgpack_modules=STATE_TYPES)


@asynccontextmanager
async def open_checkpointer(folder: str | Path) -> AsyncIterator[Any]:
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
    payload = json.dumps(
        [GRAPH_SHAPE, sent, convert_to_openai_messages(list(messages)), list(salt)], sort_keys=True, ensure_ascii=False
    )
    return f"{problem_id}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


async def _state(runner: PaCoReRunner, config: RunnableConfig) -> Any:
    return await runner.graph.aget_state(config)


def _failed_round(snapshot: Any) -> bool:
    """Whether the thread stopped because a round had no usable trajectory."""
    return any(task.error is not None and "RoundFailedError" in repr(task.error) for task in snapshot.tasks) or (
        bool(snapshot.next) and snapshot.next[0] == "collect" and _all_failed(snapshot)
    )


def _all_failed(snapshot: Any) -> bool:
    results = snapshot.values.get("results") or []
    return bool(results) and all(not record.usable for record in results)


async def _retry_point(runner: PaCoReRunner, config: RunnableConfig) -> RunnableConfig | None:
    """The checkpoint before the failed round was fanned out: replaying from it re-runs that round only.

    Rounds are fanned out by ``begin`` (the first) and by the previous round's ``collect``; the newest
    checkpoint about to run ``collect`` is the failed round's own, so the one before it is wanted.
    """
    newest = True
    async for snapshot in runner.graph.aget_state_history(config):
        if snapshot.next in (("begin",), ("collect",)):
            if not newest:
                return snapshot.config
            newest = False
    return None


async def solve_resumable(
    runner: PaCoReRunner,
    messages: MessagesInput,
    thread: str,
    *,
    trace: bool = False,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    configurable: dict[str, Any] | None = None,
) -> tuple[PaCoReResult, Status]:
    """Run PaCoRe for one problem on checkpoint thread ``thread``, resuming whatever it had done.

    ``runner`` must be compiled with a checkpointer (see :func:`open_checkpointer`); ``configurable``
    reaches every node and explorer of the run (it is not checkpointed).
    """
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    snapshot = await _state(runner, config)
    status: Status
    graph_input: dict[str, Any] | None
    if not snapshot.next and snapshot.values.get("answer") is not None:
        return build_result(snapshot.values), "finished"
    if snapshot.next and _failed_round(snapshot):
        config = await _retry_point(runner, config) or config
        graph_input, status = None, "retried"
    elif snapshot.next:
        graph_input, status = None, "resumed"
    else:
        graph_input, status = {"messages": to_messages(messages)}, "fresh"
    traced: list[Trajectory] | None = [] if trace else None
    base: RunnableConfig = {**config, "configurable": {**(configurable or {}), **config["configurable"]}}
    run_config = with_listeners(base, traced, on_event)
    with spaced_full_collections(runner.config.spaced_gc):
        state: dict[str, Any] = await runner.graph.ainvoke(graph_input, run_config, durability="sync") or {}
    if "answer" not in state:  # the run stopped before its final round (should not happen without interrupts)
        raise RoundFailedError(f"the PaCoRe graph of thread {thread!r} stopped before its final round")
    return build_result(state, traced), status
