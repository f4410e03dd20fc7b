"""Chat models for PaCoRe: vLLM (or any OpenAI-compatible server) and the embedded default."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pacore_graph.errors import UsageError
from pacore_graph.models.embedded import EmbeddedServer, shared_server
from pacore_graph.models.openai_compatible import ROUTER_HINT, OpenAICompatibleChatModel
from pacore_graph.models.preflight import check_server, discover_model, served_models, server_defaults

__all__ = [
    "EmbeddedServer",
    "OpenAICompatibleChatModel",
    "chat_model",
    "check_server",
    "configured_url",
    "discover_model",
    "served_models",
    "serving",
]


def configured_url(base_url: str | Sequence[str] | None) -> str | None:
    """The server to use: the one given, else ``OPENAI_BASE_URL``, else None (the embedded model).

    A command's repeatable ``--base-url`` arrives as a list: more than one URL is refused, naming the
    router that spreads requests over replicas instead.
    """
    if base_url is not None and not isinstance(base_url, str):
        urls = list(base_url)
        if len(urls) > 1:
            raise UsageError(f"{len(urls)} base URLs given; {ROUTER_HINT}")
        base_url = urls[0] if urls else None
    return base_url or os.environ.get("OPENAI_BASE_URL") or None


def chat_model(
    base_url: str | None = None, model: str | None = None, api_key: str | None = None, **kwargs: Any
) -> OpenAICompatibleChatModel:
    """A chat model for vLLM's OpenAI-compatible API (reasoning kept, lean transport, no client timeout).

    ``base_url`` is one server; several replicas go behind vllm-router (``pacore serve-vllm --replicas N``),
    whose URL this is then. Without a base URL and without ``OPENAI_BASE_URL`` the embedded SmolLM2 server is
    started (and stopped at exit). Without ``model`` the server's first listed model is used.

    The server's reported context (llama.cpp's, the embedded one's included, and vLLM's) becomes the model's
    ``profile``, so PaCoRe fits synthesis prompts to it; the embedded model also gets a default reply cap
    (:func:`~pacore_graph.models.preflight.server_defaults`); ``kwargs`` override them.
    """
    url = configured_url(base_url)
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    if url is None:
        server = shared_server()
        url, model = server.base_url, model or server.model
    if model is None:
        model = discover_model(url, api_key)
    defaults = server_defaults(url, model, api_key)
    return OpenAICompatibleChatModel(base_url=url, model=model, api_key=api_key, **{**defaults, **kwargs})


@contextmanager
def serving(
    base_url: str | Sequence[str] | None = None, model: str | None = None, api_key: str | None = None, **kwargs: Any
) -> Iterator[OpenAICompatibleChatModel]:
    """A chat model for the duration of a block; starts and stops the embedded server when no URL is given.

    ``base_url`` may be a command's ``--base-url`` list (one URL at most, see :func:`configured_url`)."""
    url = configured_url(base_url)
    if url is not None:
        yield chat_model(url, model, api_key, **kwargs)
        return
    with EmbeddedServer() as server:
        yield chat_model(server.base_url, model or server.model, api_key, **kwargs)
