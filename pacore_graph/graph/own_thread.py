"""Where a PaCoRe run keeps its checkpoints when it runs inside a checkpointed graph: a thread of its own.

Why not a subgraph namespace in the caller's thread: those checkpoints would stay there for good (no saver
can delete one namespace), and a model call (``PaCoReChatModel``, ``PaCoReMiddleware``) retried inside one
step could not find the proposals it already bought. So the run takes the caller's saver (the one LangGraph
lends a subgraph) and a thread named after the caller's thread, the calling task's namespace and a digest of
the conversation: a resumed step, or a retried call with the same messages, finds it again and goes on from
its last checkpoint; once the answer is returned the thread is deleted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_openai_messages
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.constants import CONF, CONFIG_KEY_CHECKPOINTER

THREAD_SEPARATOR = "|pacore|"
_BUSY: set[str] = set()  # threads a run of this process is using now (two identical calls at once get two)
_ASYNC_CAPABLE: dict[type, bool] = {}  # by saver class: whether its async methods work


def conversation_digest(messages: Sequence[BaseMessage], *parts: Any) -> str:
    """16 hex digits naming ``messages`` plus any JSON-ready ``parts`` (settings, a graph's shape)."""
    payload = json.dumps([list(parts), convert_to_openai_messages(list(messages))], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class OwnThread:
    """The saver and thread of one PaCoRe run inside a checkpointed caller, and the RunnableConfig to run it with."""

    saver: BaseCheckpointSaver[Any]
    thread_id: str
    runnable_config: RunnableConfig


def lent_saver(runnable_config: RunnableConfig | None) -> BaseCheckpointSaver[Any] | None:
    """The saver a checkpointed graph lends the node (or model call) this config is of, if any."""
    saver = ((runnable_config or {}).get(CONF) or {}).get(CONFIG_KEY_CHECKPOINTER)
    return saver if isinstance(saver, BaseCheckpointSaver) else None


def own_thread(runnable_config: RunnableConfig | None, messages: Sequence[BaseMessage], shape: Any) -> OwnThread | None:
    """The run's own thread when ``runnable_config`` is a checkpointed graph's (None otherwise).

    The run's config keeps the caller's callbacks, tags, metadata and its own ``configurable`` keys, not the
    caller's position in its graph (so the PaCoRe graph is a run of its own, not a subgraph)."""
    saver = lent_saver(runnable_config)
    if saver is None or runnable_config is None:
        return None
    configurable = runnable_config.get(CONF) or {}
    caller = configurable.get("thread_id")
    if caller is None:
        return None
    name = f"{caller}{THREAD_SEPARATOR}{configurable.get('checkpoint_ns', '')}|{conversation_digest(messages, shape)}"
    own = {key: value for key, value in configurable.items() if not key.startswith(("__", "checkpoint_"))}
    run: RunnableConfig = {key: value for key, value in runnable_config.items() if key != CONF}  # type: ignore[assignment]
    run[CONF] = {**own, "thread_id": name, CONFIG_KEY_CHECKPOINTER: saver}
    return OwnThread(saver, name, run)


async def async_capable(saver: BaseCheckpointSaver[Any]) -> bool:
    """Whether ``saver`` serves async runs: ``SqliteSaver`` and ``PostgresSaver`` are sync only (a sync agent
    lends them, and an async PaCoRe run, such as a sync model call's, then runs the sync graph in a thread)."""
    kind = type(saver)
    if kind not in _ASYNC_CAPABLE:
        try:
            await saver.aget_tuple({"configurable": {"thread_id": "", "checkpoint_ns": ""}})
        except NotImplementedError:
            _ASYNC_CAPABLE[kind] = False
        else:
            _ASYNC_CAPABLE[kind] = True
    return _ASYNC_CAPABLE[kind]


@contextmanager
def claimed(thread: OwnThread) -> Iterator[OwnThread]:
    """``thread`` for one run; when a run of this process holds it already (the same call made twice at
    once), a thread of this call's own, which a later resume will not find."""
    name = thread.thread_id
    number = 1
    while name in _BUSY:
        number += 1
        name = f"{thread.thread_id}#{number}"
    _BUSY.add(name)
    try:
        if name == thread.thread_id:
            yield thread
        else:
            renamed: RunnableConfig = {
                **thread.runnable_config,
                CONF: {**thread.runnable_config[CONF], "thread_id": name},
            }
            yield OwnThread(thread.saver, name, renamed)
    finally:
        _BUSY.discard(name)
