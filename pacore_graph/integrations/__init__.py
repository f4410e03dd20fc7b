"""PaCoRe where LangChain expects a chat model (``PaCoReChatModel``) or agent middleware (``PaCoReMiddleware``).

``PaCoReMiddleware`` needs the ``langchain`` package (its ``create_agent``): imported on first use.
"""

from typing import TYPE_CHECKING, Any

from pacore_graph.integrations.chat_model import PaCoReChatModel

if TYPE_CHECKING:  # a type checker sees the class; at run time it is imported on first use (below)
    from pacore_graph.integrations.middleware import PaCoReMiddleware

__all__ = ["PaCoReChatModel", "PaCoReMiddleware"]


def __getattr__(name: str) -> Any:
    if name == "PaCoReMiddleware":
        try:
            from pacore_graph.integrations.middleware import PaCoReMiddleware
        except ImportError as exc:
            hint = f"PaCoReMiddleware needs LangChain's agents: pip install 'langchain>=1.5' ({exc})"
            raise ImportError(hint) from exc
        return PaCoReMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
