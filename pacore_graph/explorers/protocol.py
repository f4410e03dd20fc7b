"""What produces one trajectory: a chat model call, or a whole agent episode.

Both sit behind one protocol so that one fan-out machinery serves them: the graph never knows which.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.agent import AgentExplorer
from pacore_graph.explorers.chat import ChatExplorer
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.models.unwrap import find_chat_model
from pacore_graph.records import Trajectory

__all__ = ["AgentExplorer", "ChatExplorer", "Explorer", "ModelOrExplorer", "as_explorer"]


@runtime_checkable
class Explorer(Protocol):
    """Produces one trajectory from the round's messages; ``episode`` says which one and for whom.

    Optionally ``async def expect(self, requests: int) -> None``: called as a round is admitted, with how
    many requests are about to go out on this loop (capped at the limit), to get ready for them meanwhile
    (:class:`ChatExplorer` opens connections when the model is this package's own chat model).
    """

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory: ...


ModelOrExplorer: TypeAlias = BaseChatModel | Runnable[Any, Any] | Explorer
"""What PaCoRe runs each trajectory with: a LangChain chat model, or a Runnable around one (``bind_tools``,
``bind``, ``with_config``, ``with_retry``, ``configurable_fields``, a chain ending in the model); an
:class:`Explorer`; or an agent, a Runnable or compiled graph whose output has ``messages`` (one whole episode
per trajectory)."""


def as_explorer(model_or_explorer: ModelOrExplorer, config: PaCoReConfig) -> Explorer:
    """A chat model (bare or wrapped: bind_tools, bind, with_config, with_retry, configurable_fields, a chain
    ending in the model), an Explorer, or an agent (a compiled graph or Runnable whose output has
    ``messages``). Anything PaCoRe cannot use fails here, before a run starts."""
    if isinstance(model_or_explorer, Explorer):
        return model_or_explorer
    found = find_chat_model(model_or_explorer)
    if found is not None:
        return ChatExplorer(found, config)
    if isinstance(model_or_explorer, Runnable):
        return AgentExplorer(model_or_explorer, output=lambda state: state["messages"][-1])
    raise TypeError(
        "PaCoRe needs a LangChain chat model, an Explorer, or a Runnable/compiled graph; "
        f"got {type(model_or_explorer).__name__}"
    )
