"""Check the model server before a long run, so a typo costs one clear message instead of hours of retries.

An unreachable server would otherwise fail every trajectory after its retries, and a wrong model name
would fail every problem with the same HTTP 404; both are one line here, before anything is spent.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from langchain_core.language_models import BaseChatModel

from pacore_graph.errors import PaCoReError
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel


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


def served_context(base_url: str, api_key: str | None = None, timeout: float = 5.0) -> int | None:
    """The context size in tokens that a llama.cpp server reports at ``GET /props`` (``llama-server``, and the
    embedded server, which answers there the same way); None for servers that do not say (vLLM, OpenAI) or
    cannot be asked. Why only llama.cpp's: its contexts are small (8192 for the embedded model), so a prompt
    that does not fit is the common failure; vLLM's 131072 are left to the paper's settings."""
    root = base_url.rstrip("/").removesuffix("/v1")
    request = urllib.request.Request(f"{root}/props")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            n_ctx = (json.load(response).get("default_generation_settings") or {}).get("n_ctx")
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, AttributeError):
        return None
    return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None


def discover_model(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> str:
    """The first model a server lists; also proves the server is reachable."""
    listed = served_models(base_url, api_key, timeout)
    if not listed:
        raise PaCoReError(f"the server at {base_url} lists no models")
    return listed[0]


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
