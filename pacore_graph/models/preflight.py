"""Check the model server before a long run, so a typo costs one clear message instead of hours of retries.

An unreachable server would otherwise fail every trajectory after its retries, and a wrong model name
would fail every problem with the same HTTP 404; both are one line here, before anything is spent.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from langchain_core.language_models import BaseChatModel

from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import PaCoReError
from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS, MODEL_ALIAS
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.models.unwrap import find_chat_model


def served_models(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> list[str]:
    """The model ids ``base_url/models`` lists; a PaCoReError naming the URL when it cannot be asked.

    Without ``api_key`` it sends ``$OPENAI_API_KEY``, as :func:`~pacore_graph.models.chat_model` does."""
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    request = urllib.request.Request(f"{base_url.rstrip('/')}/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            listed = json.load(response).get("data") or []
    except urllib.error.HTTPError as exc:
        raise PaCoReError(f"the model server at {base_url} answered HTTP {exc.code} to GET /models") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PaCoReError(f"cannot reach the model server at {base_url} ({reason}): is it running?") from None
    except ValueError:
        raise PaCoReError(f"the server at {base_url} is not an OpenAI-compatible API (/models is not JSON)") from None
    return [str(item.get("id")) for item in listed if isinstance(item, dict)]


def served_context(
    base_url: str, api_key: str | None = None, model: str | None = None, timeout: float = 5.0
) -> int | None:
    """The context in tokens the server reports: a llama.cpp server's ``n_ctx`` at ``GET /props`` (``llama-server``,
    and the embedded server, which answers there the same way), else vLLM's ``max_model_len`` for ``model`` (or its
    first model) at ``GET /v1/models``; None for servers that say neither (OpenAI) or cannot be asked.

    A synthesis prompt over K long references is the prompt most likely not to fit: knowing the window, PaCoRe
    fits it (:mod:`pacore_graph.synthesis.context_window`) instead of getting an HTTP 400 from the server."""
    root = base_url.rstrip("/").removesuffix("/v1")
    settings = _get_json(f"{root}/props", api_key, timeout).get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if isinstance(n_ctx, int) and n_ctx > 0:
        return n_ctx
    listed = _get_json(f"{base_url.rstrip('/')}/models", api_key, timeout).get("data") or []
    entries = [item for item in listed if isinstance(item, dict)]
    entry = next((item for item in entries if item.get("id") == model), entries[0] if entries and not model else None)
    window = (entry or {}).get("max_model_len")
    return window if isinstance(window, int) and window > 0 else None


def _get_json(url: str, api_key: str | None, timeout: float) -> dict[str, Any]:
    """``url``'s JSON object, or ``{}`` when it cannot be had (not served, not JSON, unreachable)."""
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            found = json.load(response)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def server_defaults(base_url: str, model: str, api_key: str | None = None) -> dict[str, Any]:
    """Client settings from what the server reports (``{}`` when it reports nothing), applied by ``chat_model``:

    - ``profile["max_input_tokens"]``: the context (:func:`served_context`: llama.cpp's ``/props``, vLLM's
      ``/v1/models``); a PaCoRe run uses it as its ``context_window`` when its config sets none
      (:func:`with_model_context`);
    - the embedded SmolLM2 only: ``profile["max_output_tokens"]``, the cap of a reply that names no
      ``max_tokens`` (:data:`~pacore_graph.models.embedded.EMBEDDED_MAX_TOKENS`, at most a quarter of the context).
    """
    n_ctx = served_context(base_url, api_key, model)
    if n_ctx is None:
        return {}
    profile: dict[str, Any] = {"max_input_tokens": n_ctx}
    if model == MODEL_ALIAS:
        profile["max_output_tokens"] = min(EMBEDDED_MAX_TOKENS, n_ctx // 4)
    return {"profile": profile}


def discover_model(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> str:
    """The first model a server lists; also proves the server is reachable."""
    listed = served_models(base_url, api_key, timeout)
    if not listed:
        raise PaCoReError(f"the server at {base_url} lists no models")
    return listed[0]


def served_window(model: BaseChatModel) -> int | None:
    """The context window ``model``'s server reported, for this project's client (:func:`server_defaults` put it in
    its ``profile``); None for other models, whose profile says what their provider documents, not what a server
    serves."""
    if not isinstance(model, OpenAICompatibleChatModel):
        return None
    window = (model.profile or {}).get("max_input_tokens")
    return window if isinstance(window, int) else None


def check_server(model: BaseChatModel) -> None:
    """The server of an :class:`OpenAICompatibleChatModel` answers and serves its model name. Other chat
    models are not checked."""
    if not isinstance(model, OpenAICompatibleChatModel):
        return
    models = served_models(model.base_url, model.api_key)
    if models and model.model not in models:
        raise PaCoReError(
            f"the server at {model.base_url} does not serve model {model.model!r}; it serves {', '.join(models)} "
            "(pass one of these with --model)"
        )


def with_model_context(config: PaCoReConfig, model_or_explorer: object) -> PaCoReConfig:
    """``config`` with the context its model's server reported as ``context_window``, when it sets none.

    Only the project's own client carries a server-reported context (``chat_model`` sets it for llama.cpp
    servers, whose small contexts make an overflowing synthesis prompt the common failure); other models, an
    explicit ``context_window`` and ``compat="reference"`` (which fits nothing, as the reference pipeline) are
    left as they are.
    """
    if config.context_window is not None or config.compat is not None:
        return config
    try:
        found = find_chat_model(model_or_explorer)
    except TypeError:
        return config  # not a usable model: as_explorer says why
    window = served_window(found.model) if found is not None else None
    if not window or window < 256 or (config.max_tokens is not None and config.max_tokens >= window):
        return config
    return config.model_copy(update={"context_window": window})
