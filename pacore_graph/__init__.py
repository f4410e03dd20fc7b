"""PaCoRe (Parallel Coordinated Reasoning) as a composable LangGraph operator.

One way to run it per use:
- one problem: ``await asolve(model, messages, config)`` / ``solve(...)``;
- many problems, resumably, into an output folder: ``RunFolder(...).run(model, config, problems)``;
- inside a LangGraph graph: ``PaCoReNode(model, config)`` in place of a model call, or the uncompiled
  ``build_pacore_graph(model, config)`` run with ``context=PaCoReContext(messages=...)``;
- wherever LangChain takes a chat model (``create_agent``, LCEL): ``PaCoReChatModel(model=..., config=...)``;
  as ``create_agent`` middleware: ``PaCoReMiddleware(config=...)`` (needs ``langchain``);
- as a tool an agent decides to call (escalation): ``pacore_tool(strong_model, config, thread_tokens=...)``;
  ``PaCoReToolState`` as the agent's state keeps its per-thread spend apart from the history.

Benchmark and agent authors find the parts these are made of in :mod:`pacore_graph.extend`.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type checker sees every name; at run time each is imported on first use (below)
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
    from pacore_graph.integrations.middleware import PaCoReMiddleware
    from pacore_graph.integrations.tool import pacore_tool
    from pacore_graph.integrations.tool_state import PaCoReToolState
    from pacore_graph.models import chat_model
    from pacore_graph.records import PaCoReResult

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
    "PaCoReToolState",
    "Problem",
    "RoundFailedError",
    "RunFolder",
    "asolve",
    "build_pacore_graph",
    "chat_model",
    "pacore_tool",
    "solve",
]


# Where each public name lives. Importing ``pacore_graph`` (which any of its modules does first, ``pacore`` on the
# command line included) loads none of them: LangGraph and LangChain load with the first name that needs them.
_HOMES = {
    "AgentExplorer": "pacore_graph.explorers.agent",
    "EpisodeContext": "pacore_graph.explorers.episode",
    "PaCoReChatModel": "pacore_graph.integrations",
    "PaCoReConfig": "pacore_graph.config",
    "PaCoReContext": "pacore_graph.graph.context",
    "PaCoReError": "pacore_graph.errors",
    "PaCoReMiddleware": "pacore_graph.integrations.middleware",  # needs the langchain package
    "PaCoReNode": "pacore_graph.graph.node",
    "PaCoReResult": "pacore_graph.records",
    "PaCoReToolState": "pacore_graph.integrations.tool_state",  # needs the langchain package
    "Problem": "pacore_graph.batch.folder",
    "RoundFailedError": "pacore_graph.errors",
    "RunFolder": "pacore_graph.batch.folder",
    "asolve": "pacore_graph.graph.runner",
    "build_pacore_graph": "pacore_graph.graph.builder",
    "chat_model": "pacore_graph.models",
    "pacore_tool": "pacore_graph.integrations.tool",
    "solve": "pacore_graph.graph.runner",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept in this module's namespace)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
