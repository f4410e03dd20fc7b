"""One trajectory = one chat completion from a LangChain chat model (bound tools and wrappers included).

Every call is one ``ainvoke`` of the model as the user built it (wrappers and bindings included), an ordinary
LangChain chat-model run: callbacks, tracing, ``astream_events`` and ``stream_mode="messages"`` see each
trajectory, tagged with ``pacore_round`` / ``pacore_index``. The explorer has no road of its own to any model:
what a call costs is the model's business (this project's client keeps a whole message cheap itself).

Requests: PaCoReConfig's sampling (temperature, top_p, max_tokens, model_kwargs) fills in only what the
model and its bindings leave unset, for models that take OpenAI's parameters (this project's client,
ChatOpenAI); other chat models are called as configured. Earlier rounds never stream through LangChain
(``stream=False``: K token streams nobody shows would cost client CPU); the final round streams when a
streaming consumer is attached. ``PaCoReConfig.stream`` makes every request stream from the server: for
this project's client that is its transport (``sse``), assembled without a LangChain chunk per token.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import ensure_config

from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.models.sse import reasoning_of
from pacore_graph.models.unwrap import WrappedChatModel, with_model, without_retries
from pacore_graph.records import Trajectory
from pacore_graph.synthesis.prompt import message_text


def trajectory_from_message(message: AIMessage, extra: dict[str, Any] | None = None) -> Trajectory:
    """Read reasoning, tool calls, usage and finish reason off a LangChain AIMessage, whoever produced it."""
    usage: Mapping[str, Any] = message.usage_metadata or {}
    metadata = message.response_metadata or {}
    token_usage = metadata.get("token_usage") or {}
    return Trajectory(
        content=message_text(message),
        reasoning=reasoning_of(message.additional_kwargs),
        tool_calls=[{"name": c["name"], "args": c["args"], "id": c.get("id")} for c in message.tool_calls],
        prompt_tokens=usage.get("input_tokens", token_usage.get("prompt_tokens")),
        completion_tokens=usage.get("output_tokens", token_usage.get("completion_tokens")),
        finish_reason=metadata.get("finish_reason"),
        model_name=metadata.get("model_name"),
        message_id=message.id,
        extra=extra or {},
    )


def as_pacore_calls_it(model: BaseChatModel, request_timeout: float | None) -> BaseChatModel:
    """A ChatOpenAI that keeps vLLM's reasoning, leaves retries to PaCoRe and times out with it (see
    models/chat_openai.py); any other model as it is. A process that never imported langchain-openai holds no
    ChatOpenAI, and does not import it here (about 30 MB)."""
    if "langchain_openai" not in sys.modules:
        return model
    from pacore_graph.models import chat_openai

    return chat_openai.as_pacore_calls_it(model, request_timeout)


def takes_openai_params(model: BaseChatModel) -> bool:
    """Whether ``model`` sends PaCoReConfig's sampling settings as OpenAI request fields: this project's client
    or langchain-openai's (ChatOpenAI, AzureChatOpenAI). A process that never imported langchain-openai holds
    none of its models, and does not import it here."""
    if isinstance(model, OpenAICompatibleChatModel):
        return True
    if "langchain_openai" not in sys.modules:
        return False
    from pacore_graph.models import chat_openai

    return chat_openai.is_chat_openai(model)


class ChatExplorer:
    """One trajectory = one chat completion; ``model`` is a chat model or a wrapper found around one."""

    def __init__(self, model: BaseChatModel | WrappedChatModel, config: PaCoReConfig | None = None):
        found = model if isinstance(model, WrappedChatModel) else WrappedChatModel(model=model, call=model)
        self.config = config or PaCoReConfig()
        upgraded = as_pacore_calls_it(found.model, self.config.request_timeout)
        if upgraded is not found.model:  # a ChatOpenAI: same settings, vLLM's reasoning kept, no retries of its own
            found = WrappedChatModel(
                model=upgraded,
                call=with_model(found.call, upgraded),
                prefix=found.prefix,
                bound=found.bound,
                configurable=found.configurable,
            )
        call = without_retries(found.call)  # one layer of retries: PaCoRe's
        if call is not found.call:
            found = dataclasses.replace(found, call=call)
        self.found = found
        self.model = found.model
        self._early, self._final = self._request_kwargs()

    def _fill_ins(self, configured: frozenset[str] = frozenset()) -> dict[str, Any]:
        if not takes_openai_params(self.model):
            return {}
        settings = self.config
        wanted = {"temperature": settings.temperature, "top_p": settings.top_p, "max_tokens": settings.max_tokens}
        wanted.update(settings.model_kwargs)
        return {
            name: value for name, value in wanted.items() if value is not None and not self.found.sets(name, configured)
        }

    def _request_kwargs(self, configured: frozenset[str] = frozenset()) -> tuple[dict[str, Any], dict[str, Any]]:
        """The call kwargs of earlier rounds and of the final round."""
        fill = self._fill_ins(configured)
        if isinstance(self.model, OpenAICompatibleChatModel):
            if self.config.stream:
                fill["sse"] = True  # stream from the server; LangChain chunks only when someone listens
            return {**fill, "stream": False}, fill
        if self.found.sets_streaming():
            return fill, fill
        return {**fill, "stream": self.config.stream}, {**fill, "stream": True} if self.config.stream else fill

    async def expect(self, requests: int) -> None:
        """``requests`` requests are about to go out: our own chat model opens connections for them meanwhile."""
        if isinstance(self.model, OpenAICompatibleChatModel):
            await self.model.apreconnect(requests)

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        config = episode.config
        kwargs = self._final if episode.final else self._early
        if self.found.configurable:  # configurable fields the run sets are the user's: do not override them
            configured = frozenset(ensure_config(config).get("configurable") or ()) & set(self.found.configurable)
            if configured:
                kwargs = self._request_kwargs(configured)[1 if episode.final else 0]
        if self.found.prefix is not None:
            messages = await self.found.prefix.ainvoke(messages, config)
        message = await self.found.call.ainvoke(messages, config, **kwargs)
        return trajectory_from_message(message)
