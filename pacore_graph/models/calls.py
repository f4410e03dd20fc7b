"""How PaCoRe calls a chat model it was given: the model as PaCoRe calls it, the request fields each round's call
carries, and whether the model can open its connections before a burst of requests.

What differs between kinds of model (this project's client, langchain-openai's ChatOpenAI, any other) is decided
here, beside the models, so that the explorer calls every model the same way. A process that never imported
langchain-openai holds none of its models, and nothing here imports it (about 30 MB).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.language_models import BaseChatModel

from pacore_graph.config import PaCoReConfig
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.models.unwrap import WrappedChatModel


def as_pacore_calls_it(model: BaseChatModel, request_timeout: float | None) -> BaseChatModel:
    """A ChatOpenAI that keeps vLLM's reasoning, leaves retries to PaCoRe and times out with it (see
    models/chat_openai.py); any other model as it is."""
    if "langchain_openai" not in sys.modules:
        return model
    from pacore_graph.models import chat_openai

    return chat_openai.as_pacore_calls_it(model, request_timeout)


def takes_openai_params(model: BaseChatModel) -> bool:
    """Whether ``model`` sends PaCoReConfig's sampling settings as OpenAI request fields: this project's client
    or langchain-openai's (ChatOpenAI, AzureChatOpenAI)."""
    if isinstance(model, OpenAICompatibleChatModel):
        return True
    if "langchain_openai" not in sys.modules:
        return False
    from pacore_graph.models import chat_openai

    return chat_openai.is_chat_openai(model)


def round_kwargs(
    found: WrappedChatModel, settings: PaCoReConfig, configured: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The call kwargs of earlier rounds and of the final round.

    PaCoReConfig's sampling fills in only what the model, its bindings and the run's ``configured`` fields leave
    unset, for models that take OpenAI's parameters. Earlier rounds never stream tokens through LangChain
    (``stream=False``: K token streams nobody shows would cost client CPU); the final round streams when a
    streaming consumer is attached. ``PaCoReConfig.stream`` makes every request stream from the server: for this
    project's client that is its transport (``sse``), assembled without a LangChain chunk per token; for other
    models LangChain's own streaming, unless the user set it on the model.
    """
    fill: dict[str, Any] = {}
    if takes_openai_params(found.model):
        wanted = {"temperature": settings.temperature, "top_p": settings.top_p, "max_tokens": settings.max_tokens}
        wanted.update(settings.model_kwargs)
        fill = {name: value for name, value in wanted.items() if value is not None and not found.sets(name, configured)}
    if isinstance(found.model, OpenAICompatibleChatModel):
        if settings.stream:
            fill["sse"] = True
        return {**fill, "stream": False}, fill
    if found.sets_streaming():
        return fill, fill
    return {**fill, "stream": settings.stream}, {**fill, "stream": True} if settings.stream else fill


def preconnector(model: BaseChatModel) -> Callable[[int], Awaitable[None]] | None:
    """What opens ``n`` connections to the model's server in the background, for a model that can (this project's
    client); None for the others."""
    return model.apreconnect if isinstance(model, OpenAICompatibleChatModel) else None
