"""What an explorer knows about the one trajectory (model call or agent episode) it is asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig


@dataclass(frozen=True)
class EpisodeContext:
    """The per-trajectory context every :class:`~pacore_graph.explorers.protocol.Explorer` receives.

    - ``round_index`` / ``index``: which round (0-based; the final round is ``len(rounds)``) and which
      of its K trajectories this is.
    - ``final``: this is the final round, whose one conclusion becomes the answer.
    - ``runnable_config``: the RunnableConfig for the child run (the model call or the agent graph). It carries
      the caller's callbacks, tags and metadata, plus ``pacore_round`` / ``pacore_index`` in the
      metadata; when a handler sees the run, earlier rounds are tagged ``nostream`` so only the final round
      streams tokens. Pass it on, so every model call stays visible to tracing and streaming.
    - ``payload``: what the caller attached to the run for every episode of this problem (the SWE task
      row, say), or None; under ``PaCoReNode`` it is the enclosing graph's runtime context.
    - :meth:`record`: hands an episode record (anything, e.g. a JSON-ready dict) to the caller's sink.
    - ``model``: in a panel run (``PaCoReConfig.panel``), the name of the model this slot was given; None
      otherwise.
    - ``unobserved``: no callback handler is attached to the run (none given, no tracing, no streaming of
      messages or events), so model calls made under ``runnable_config`` would be seen by nobody; an explorer may
      then skip building their LangChain runs. False unless the runner checked (once per run).

    Explorers used outside a PaCoRe run (a benchmark's own calls) build one with only the indices.
    """

    round_index: int = 0
    index: int = 0
    final: bool = False
    runnable_config: RunnableConfig = field(default_factory=RunnableConfig)
    payload: Any = None
    sink: Callable[[Any], None] | None = None
    unobserved: bool = False
    model: str | None = None

    def record(self, item: Any) -> None:
        """Give ``item`` to the run's record sink; dropped when the caller attached none."""
        if self.sink is not None:
            self.sink(item)
