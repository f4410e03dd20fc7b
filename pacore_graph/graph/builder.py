"""The PaCoRe StateGraph: K trajectories fanned out with Send, a collector compacts them.

    START -> begin --Send x K--> trajectory -> collect --Send x K--> trajectory -> collect ... -> END

Each trajectory is one task (several nodes per trajectory would advance in lockstep with the slowest
branch): :class:`~pacore_graph.graph.trajectory.TrajectoryLife`. The next round is fanned out straight from
``collect`` (:mod:`~pacore_graph.graph.rounds`): a separate controller node would cost one more superstep
(and checkpoint) per round. State is plain JSON data (:mod:`~pacore_graph.graph.state`). The conversation is
not in state: it comes with every run in the runtime context
(:class:`~pacore_graph.graph.context.PaCoReContext`), so the checkpoints of a chat thread do not grow with
the chat.

Every node runs both ways: ``ainvoke`` under an async graph, ``invoke`` under a sync one (so a sync
checkpointer such as ``SqliteSaver`` works). Nodes are plain Runnables, not sync functions, because
LangGraph runs sync functions of an async graph through a thread pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END, START, StateGraph

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.panel import Models
from pacore_graph.graph.context import PaCoReContext, current_run
from pacore_graph.graph.rounds import Rounds
from pacore_graph.graph.state import PaCoReState, TrajectoryTask
from pacore_graph.graph.trajectory import TrajectoryLife


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
    model_or_explorer: Models,
    config: PaCoReConfig | None = None,
    *,
    limiter: ConcurrencyLimiter | None = None,
) -> StateGraph[PaCoReState, PaCoReContext, PaCoReState, PaCoReState]:
    """An uncompiled StateGraph running PaCoRe; compile with your own checkpointer.

    Run it with ``graph.invoke({}, config, context=PaCoReContext(messages=[...]))``. Output: ``answer``
    (an AIMessage); :func:`~pacore_graph.graph.runner.finished_rounds` reads the rounds (plain data, each
    with its records) from the output state. Resume a thread through
    :class:`~pacore_graph.graph.runner.PaCoReRunner` (``resume=True``): it gives a resumed round the conclusions
    it builds on. Async runs wait for the limiter to admit each round before it fans out.
    """
    rounds = Rounds(model_or_explorer, config, limiter)

    async def trajectory(task: TrajectoryTask, runnable_config: RunnableConfig) -> dict[str, Any]:
        return await TrajectoryLife(rounds, current_run(), task).live(runnable_config)

    builder = StateGraph(PaCoReState, context_schema=PaCoReContext)
    builder.add_node("begin", _Step("begin", rounds.begin, rounds.abegin), destinations=("trajectory",))
    builder.add_node("trajectory", _Step("trajectory", lambda task, cfg: run_sync(trajectory(task, cfg)), trajectory))
    builder.add_node("collect", _Step("collect", rounds.collect, rounds.acollect), destinations=("trajectory", END))
    builder.add_edge(START, "begin")
    builder.add_edge("trajectory", "collect")
    return builder
