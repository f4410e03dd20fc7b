"""PaCoReNode: drop PaCoRe into any graph with a messages channel, in place of a model call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.runtime import get_runtime

from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.panel import Models
from pacore_graph.graph.run_state import ProgressListener
from pacore_graph.graph.runner import MessagesInput, PaCoReRunner


class PaCoReNode(Runnable[Any, dict[str, Any]]):
    """Reads ``state[messages_key]``, runs PaCoRe, and appends one AIMessage: the final answer.

    The state is any state LangGraph takes (a ``TypedDict`` such as ``MessagesState``, a dataclass, a pydantic
    model): its input type is ``Any`` so that ``StateGraph(...).add_node`` accepts the node for each of them.

    The answer carries the final trajectory's tool calls, so the node can be the model step of a
    ``ToolNode`` / ``tools_condition`` loop (give it ``model.bind_tools(tools)``). Its
    ``response_metadata`` has ``pacore`` (rounds, per-trajectory usage, TTC, failures), ``model_name``
    and ``finish_reason``; its ``usage_metadata`` counts every token of every trajectory.

    Streaming: every trajectory is a chat-model run that callbacks see; under ``stream_mode="messages"``
    the final round's tokens stream as this node's, and progress events (round started / finished,
    trajectory finished with its tokens) go to ``stream_mode="custom"``. The channel needs an
    appending reducer such as ``add_messages`` (``MessagesState`` has one).

    Checkpointing: in a graph compiled with a saver, the PaCoRe run checkpoints with that saver on a thread of its
    own (each conclusion stored once), deleted as the answer is returned; resuming the thread
    (``invoke(None, config)``) continues an interrupted round and re-runs a round that failed (see
    :mod:`pacore_graph.graph.own_thread`). Explorers get the enclosing graph's runtime context as their payload.
    """

    def __init__(
        self,
        model_or_explorer: Models,
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

    def _messages(self, input: Any) -> MessagesInput:
        """The conversation: the state's ``messages_key`` item (a dict state) or attribute (a dataclass or
        pydantic state)."""
        missing = object()
        if isinstance(input, Mapping):
            messages = input.get(self.messages_key, missing)
        else:
            messages = getattr(input, self.messages_key, missing)
        if messages is missing:
            raise KeyError(f"PaCoReNode reads state[{self.messages_key!r}], which this state does not have")
        found: MessagesInput = messages
        return found

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        result = await self.runner.arun(self._messages(input), config, trace=self.trace, **enclosing_graph())
        return {self.messages_key: [result.message]}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        result = self.runner.run(self._messages(input), config, trace=self.trace, **enclosing_graph())
        return {self.messages_key: [result.message]}


class EnclosingGraph(TypedDict, total=False):
    """What a PaCoRe run takes from the graph it runs inside (see :func:`enclosing_graph`)."""

    on_event: ProgressListener
    payload: Any


def enclosing_graph() -> EnclosingGraph:
    """Progress events to the enclosing graph's custom stream; its runtime context as the payload."""
    try:
        return {"on_event": get_stream_writer(), "payload": get_runtime().context}
    except (RuntimeError, KeyError):  # not inside a graph run (KeyError: inside a plain chain's run)
        return {}
