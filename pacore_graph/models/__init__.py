"""Chat models for PaCoRe: vLLM (or any OpenAI-compatible server) and the embedded default."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pacore_graph.models.embedded import EmbeddedServer, shared_server
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.models.preflight import check_server, discover_model, served_models

__all__ = [
    "EmbeddedServer",
    "OpenAICompatibleChatModel",
    "chat_model",
    "check_server",
    "discover_model",
    "served_models",
    "serving",
]


def configured_urls(base_urls: str | Sequence[str] | None) -> list[str]:
    """The servers to use: the ones given, else ``OPENAI_BASE_URL``, else none (the embedded model)."""
    urls = [base_urls] if isinstance(base_urls, str) else list(base_urls or [])
    if not urls and os.environ.get("OPENAI_BASE_URL"):
        urls = [os.environ["OPENAI_BASE_URL"]]
    return urls


def chat_model(
    base_url: str | Sequence[str] | None = None,
    model: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> OpenAICompatibleChatModel:
    """A chat model for vLLM's OpenAI-compatible API (reasoning kept, lean transport, no client timeout).

    ``base_url`` may list several replicas; trajectories go to the least busy. Without a base URL and
    without ``OPENAI_BASE_URL`` the embedded SmolLM2 server is started (and stopped at exit). Without
    ``model`` the server's first listed model is used.
    """
    urls = configured_urls(base_url)
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    if not urls:
        server = shared_server()
        urls, model = [server.base_url], model or server.model
    if model is None:
        model = discover_model(urls[0], api_key)
    return OpenAICompatibleChatModel(base_urls=urls, model=model, api_key=api_key, **kwargs)


@contextmanager
def serving(
    base_urls: str | Sequence[str] | None = None, model: str | None = None, api_key: str | None = None, **kwargs: Any
) -> Iterator[OpenAICompatibleChatModel]:
    """A chat model for the duration of a block; starts and stops the embedded server when no URL is given."""
    urls = configured_urls(base_urls)
    if urls:
        yield chat_model(urls, model, api_key, **kwargs)
        return
    with EmbeddedServer() as server:
        yield chat_model(server.base_url, model or server.model, api_key, **kwargs)
