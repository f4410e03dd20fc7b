"""PaCoReNode: drop PaCoRe into any graph with a messages channel, in place of a model call."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.runtime import get_runtime

from pacore_graph.config import PaCoReConfig
from pacore_graph.graph.runner import PaCoReRunner


class PaCoReNode(Runnable[dict[str, Any], dict[str, Any]]):
    """Reads ``state[messages_key]``, runs PaCoRe, and appends one AIMessage: the final answer.

    The answer carries the final trajectory's tool calls, so the node can be the model step of a
    ``ToolNode`` / ``tools_condition`` loop (give it ``model.bind_tools(tools)``). Its
    ``response_metadata`` has ``pacore`` (rounds, per-trajectory usage, TTC, failures), ``model_name``
    and ``finish_reason``; its ``usage_metadata`` counts every token of every trajectory.

    Streaming: every trajectory is a chat-model run that callbacks see; under ``stream_mode="messages"``
    the final round's tokens stream as this node's, and progress events (round started / finished,
    trajectory finished with its tokens) go to ``stream_mode="custom"``. The channel needs an
    appending reducer such as ``add_messages`` (``MessagesState`` has one).

    Checkpointing: the PaCoRe graph runs as a subgraph and checkpoints with the enclosing graph's saver
    (sync or async); resuming the thread (``invoke(None, config)``) continues an interrupted round and
    re-runs a round that failed. Explorers get the enclosing graph's runtime context as their payload.
    """

    def __init__(
        self,
        model_or_explorer: Any,
        config: PaCoReConfig | None = None,
        *,
        messages_key: str = "messages",
        trace: bool = False,
    ):
        self.messages_key = messages_key
        self.trace = trace
        self.runner = PaCoReRunner(model_or_explorer, config)
        self.name = "pacore"

    @property
    def config(self) -> PaCoReConfig:
        return self.runner.config

    def _messages(self, input: dict[str, Any]) -> Any:
        if self.messages_key not in input:
            raise KeyError(f"PaCoReNode reads state[{self.messages_key!r}], which this state does not have")
        return input[self.messages_key]

    async def ainvoke(self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any):
        result = await self.runner.arun(self._messages(input), config, **enclosing_graph_options(self.trace))
        return {self.messages_key: [result.message]}

    def invoke(self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any):
        result = self.runner.run(self._messages(input), config, **enclosing_graph_options(self.trace))
        return {self.messages_key: [result.message]}


def enclosing_graph_options(trace: bool) -> dict[str, Any]:
    """Progress events to the enclosing graph's custom stream; its runtime context as the payload."""
    try:
        return {"trace": trace, "on_event": get_stream_writer(), "payload": get_runtime().context}
    except (RuntimeError, KeyError):  # not inside a graph run (KeyError: inside a plain chain's run)
        return {"trace": trace}
