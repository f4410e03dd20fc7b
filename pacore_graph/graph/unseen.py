"""A run no callback handler sees does not hand the PaCoRe graph what only handlers would read.

Why: LangGraph copies its run config's metadata and callbacks into every task it prepares (a
``merge_configs`` per Send). Run as a node of an enclosing graph, that config carries the enclosing
task's ``langgraph_*`` metadata, which every task of the PaCoRe graph overwrites with its own, and the
enclosing task's callback manager, which every task replaces with a child of the PaCoRe graph's run. The
enclosing node's config is also LangChain's ambient config (``var_child_runnable_config``), which
LangGraph merges in again. With handlers attached, the run keeps all of it: a trace shows the PaCoRe
graph's run under the enclosing node with that node's metadata. With none attached (see
:func:`~pacore_graph.graph.context.unobserved`) nobody reads either, yet copying them for each
trajectory cost about 6% of the client's CPU at [32, 4] (``docs/performance.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

# the metadata LangGraph sets on each task (langgraph.pregel's task preparation): the PaCoRe graph's own
# tasks set them again, so the enclosing task's values are never what a task of the PaCoRe graph carries
TASK_METADATA = frozenset(
    {"langgraph_step", "langgraph_node", "langgraph_triggers", "langgraph_path", "langgraph_checkpoint_ns"}
)


def unseen_removed(runnable_config: RunnableConfig) -> RunnableConfig:
    """``runnable_config`` without its callbacks and the enclosing task's metadata; for runs no handler sees."""
    kept: dict[str, Any] = {key: value for key, value in runnable_config.items() if key != "callbacks"}
    metadata = runnable_config.get("metadata")
    if metadata:
        kept["metadata"] = {key: value for key, value in metadata.items() if key not in TASK_METADATA}
    return kept  # type: ignore[return-value]


@contextmanager
def ambient_unseen_removed(unobserved: bool) -> Iterator[None]:
    """Around a run no handler sees: the ambient config the graph merges in, without the same."""
    ambient = var_child_runnable_config.get() if unobserved else None
    if not ambient:
        yield
        return
    token = var_child_runnable_config.set(unseen_removed(ambient))
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)
