"""PaCoRe wherever LangChain expects a chat model (``PaCoReChatModel``), agent middleware (``PaCoReMiddleware``)
or a tool an agent decides to call (``pacore_tool``; ``PaCoReToolState`` keeps its per-thread spend in a key of its
own).

``PaCoReMiddleware`` and ``PaCoReToolState`` need the ``langchain`` package (its ``create_agent``): imported on
first use.
"""

import importlib
from typing import TYPE_CHECKING, Any

from pacore_graph.integrations.chat_model import PaCoReChatModel
from pacore_graph.integrations.tool import PaCoReTool, pacore_tool

if TYPE_CHECKING:  # a type checker sees the classes; at run time they are imported on first use (below)
    from pacore_graph.integrations.middleware import PaCoReMiddleware
    from pacore_graph.integrations.tool_state import PaCoReToolState

__all__ = ["PaCoReChatModel", "PaCoReMiddleware", "PaCoReTool", "PaCoReToolState", "pacore_tool"]

_NEEDS_LANGCHAIN = {
    "PaCoReMiddleware": "pacore_graph.integrations.middleware",
    "PaCoReToolState": "pacore_graph.integrations.tool_state",
}


def __getattr__(name: str) -> Any:
    home = _NEEDS_LANGCHAIN.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(home)
    except ImportError as exc:
        hint = f"{name} needs LangChain's agents: pip install 'langchain>=1.5' ({exc})"
        raise ImportError(hint) from exc
    return getattr(module, name)
