"""One trajectory = one chat completion from a LangChain chat model (bound tools and wrappers included).

Every call is one ``ainvoke`` of the model as the user built it (wrappers and bindings included), an ordinary
LangChain chat-model run: callbacks, tracing, ``astream_events`` and ``stream_mode="messages"`` see each
trajectory, tagged with ``pacore_round`` / ``pacore_index``. The explorer has no road of its own to any model:
what a call costs is the model's business (this project's client keeps a whole message cheap itself).

What each round's call carries (PaCoReConfig's sampling where the model leaves it unset, whether it streams) is
decided beside the models (:func:`~pacore_graph.models.calls.round_kwargs`): the explorer calls every model alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import ensure_config

from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.models.calls import as_pacore_calls_it, preconnector, round_kwargs
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
        self._early, self._final = round_kwargs(found, self.config)
        self._preconnect = preconnector(found.model)

    async def expect(self, requests: int) -> None:
        """``requests`` requests are about to go out: a model that can opens connections for them meanwhile."""
        if self._preconnect is not None:
            await self._preconnect(requests)

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        runnable_config = episode.runnable_config
        kwargs = self._final if episode.final else self._early
        if self.found.configurable:  # configurable fields the run sets are the user's: do not override them
            configured = frozenset(ensure_config(runnable_config).get("configurable") or ()) & set(
                self.found.configurable
            )
            if configured:
                kwargs = round_kwargs(self.found, self.config, configured)[1 if episode.final else 0]
        if self.found.prefix is not None:
            messages = await self.found.prefix.ainvoke(messages, runnable_config)
        message = await self.found.call.ainvoke(messages, runnable_config, **kwargs)
        return trajectory_from_message(message)
