"""PaCoRe (Parallel Coordinated Reasoning) as a composable LangGraph operator.

One way to run it per use:
- one problem: ``await asolve(model, messages, config)`` / ``solve(...)``;
- many problems, resumably, into an output folder: ``RunFolder(...).run(model, config, problems)``;
- inside a LangGraph graph: ``PaCoReNode(model, config)`` in place of a model call, or the uncompiled
  ``build_pacore_graph(model, config)`` run with ``context=PaCoReContext(messages=...)``;
- wherever LangChain takes a chat model (``create_agent``, LCEL): ``PaCoReChatModel(model=..., config=...)``;
  as ``create_agent`` middleware: ``PaCoReMiddleware(config=...)`` (needs ``langchain``).

Benchmark and agent authors find the parts these are made of in :mod:`pacore_graph.extend`.
"""

from typing import TYPE_CHECKING, Any

from pacore_graph.batch.folder import Problem, RunFolder
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import PaCoReError, RoundFailedError
from pacore_graph.explorers.agent import AgentExplorer
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.graph.builder import build_pacore_graph
from pacore_graph.graph.context import PaCoReContext
from pacore_graph.graph.node import PaCoReNode
from pacore_graph.graph.runner import asolve, solve
from pacore_graph.integrations import PaCoReChatModel
from pacore_graph.models import chat_model
from pacore_graph.records import PaCoReResult

if TYPE_CHECKING:  # a type checker sees the class; at run time it is imported on first use (below)
    from pacore_graph.integrations.middleware import PaCoReMiddleware

__all__ = [
    "AgentExplorer",
    "EpisodeContext",
    "PaCoReChatModel",
    "PaCoReConfig",
    "PaCoReContext",
    "PaCoReError",
    "PaCoReMiddleware",
    "PaCoReNode",
    "PaCoReResult",
    "Problem",
    "RoundFailedError",
    "RunFolder",
    "asolve",
    "build_pacore_graph",
    "chat_model",
    "solve",
]


def __getattr__(name: str) -> Any:
    """``PaCoReMiddleware`` is imported on first use: it needs the ``langchain`` package."""
    if name == "PaCoReMiddleware":
        from pacore_graph import integrations

        return integrations.PaCoReMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
