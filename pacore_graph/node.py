"""PaCoReNode: drop PaCoRe into any graph with a messages channel, in place of a model call."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_stream_writer

from pacore_graph.config import PaCoReConfig
from pacore_graph.run import PaCoReRunner
from pacore_graph.sync import run_sync


class PaCoReNode(Runnable[dict[str, Any], dict[str, Any]]):
    """Reads ``state[messages_key]``, runs PaCoRe, and appends one AIMessage: the final answer.

    The message's ``response_metadata["pacore"]`` carries the rounds, per-trajectory usage, TTC and
    failures; its ``usage_metadata`` counts every token of every trajectory. Progress events (round
    started / finished, trajectory finished with its tokens) stream in LangGraph's ``custom`` mode.
    The channel needs an appending reducer such as ``add_messages`` (``MessagesState`` has one).
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

    async def ainvoke(self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any):
        if self.messages_key not in input:
            raise KeyError(f"PaCoReNode reads state[{self.messages_key!r}], which this state does not have")
        result = await self.runner.arun(
            input[self.messages_key], config, trace=self.trace, on_event=_outer_stream_writer()
        )
        return {self.messages_key: [result.message]}

    def invoke(self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any):
        return run_sync(self.ainvoke(input, config, **kwargs))


def _outer_stream_writer():
    """The enclosing graph's custom-stream writer, so progress events reach its ``stream_mode="custom"``."""
    try:
        return get_stream_writer()
    except RuntimeError:  # not inside a graph run
        return None
