"""What produces one trajectory: a chat model call, or a whole agent episode.

Both sit behind one protocol so that one fan-out machinery serves them: the graph never knows which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.runnables import Runnable, RunnableConfig

from pacore_graph.config import PaCoReConfig
from pacore_graph.models.chat_openai import keep_reasoning
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel, reasoning_of
from pacore_graph.prompt import message_text
from pacore_graph.records import Trajectory


@runtime_checkable
class Explorer(Protocol):
    """Produces one trajectory from the round's messages."""

    async def explore(self, messages: list[BaseMessage], *, round_index: int, index: int) -> Trajectory: ...


def _sampling(config: PaCoReConfig) -> dict[str, Any]:
    params = {"temperature": config.temperature, "top_p": config.top_p}
    if config.max_tokens is not None:
        params["max_tokens"] = config.max_tokens
    return {**params, **config.model_kwargs}


def trajectory_from_message(message: AIMessage, extra: dict[str, Any] | None = None) -> Trajectory:
    """Read reasoning, usage and finish reason off a LangChain AIMessage, whoever produced it."""
    usage = message.usage_metadata or {}
    metadata = message.response_metadata or {}
    token_usage = metadata.get("token_usage") or {}
    return Trajectory(
        content=message_text(message),
        reasoning=reasoning_of(message.additional_kwargs),
        prompt_tokens=usage.get("input_tokens", token_usage.get("prompt_tokens")),
        completion_tokens=usage.get("output_tokens", token_usage.get("completion_tokens")),
        finish_reason=metadata.get("finish_reason"),
        extra=extra or {},
    )


class ChatExplorer:
    """One trajectory = one chat completion from a LangChain chat model.

    Sampling (temperature, top_p, max_tokens) is applied to models that take OpenAI's parameters (this
    project's client and ChatOpenAI); any other chat model is called as the caller configured it.
    """

    def __init__(self, model: BaseChatModel, config: PaCoReConfig | None = None):
        model = keep_reasoning(model) if _takes_openai_params(model) else model
        self.model = model
        self.config = config or PaCoReConfig()
        self._params = _sampling(self.config)
        self._fast = isinstance(model, OpenAICompatibleChatModel)
        self._kwargs = self._params if self._fast or _takes_openai_params(model) else {}
        if self._fast and self.config.stream:
            self._params = {**self._params, "stream": True}
        self._converted: dict[int, tuple[list[BaseMessage], list[dict[str, Any]]]] = {}

    def _openai_messages(self, messages: list[BaseMessage]) -> list[dict[str, Any]]:
        """Convert once per round: all K trajectories of a round share one message list object."""
        key = id(messages)
        cached = self._converted.get(key)
        if cached is not None and cached[0] is messages:
            return cached[1]
        converted = convert_to_openai_messages(messages)
        if len(self._converted) >= 256:  # rounds of at most this many problems in flight at once
            self._converted.pop(next(iter(self._converted)))
        self._converted[key] = (messages, converted)  # holding the list keeps its id from being reused
        return converted

    async def explore(self, messages: list[BaseMessage], *, round_index: int, index: int) -> Trajectory:
        if self._fast:
            # No LangChain message objects or callbacks on the hot path: about 0.5 ms less per call.
            raw = await self.model.acomplete(self._openai_messages(messages), **self._params)
            usage = raw.get("usage") or {}
            return Trajectory(
                content=raw.get("content") or "",
                reasoning=reasoning_of(raw),
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                finish_reason=raw.get("finish_reason"),
            )
        message = await self.model.ainvoke(messages, **self._kwargs)
        return trajectory_from_message(message)


def _takes_openai_params(model: BaseChatModel) -> bool:
    return any(cls.__name__ == "BaseChatOpenAI" for cls in type(model).__mro__)


def _default_input(messages: list[BaseMessage]) -> dict[str, Any]:
    return {"messages": messages}


class AgentExplorer:
    """One trajectory = one whole agent episode: any compiled graph or Runnable, run to completion.

    ``output`` turns the episode's final state into the message the next round sees (for a repair
    agent: its patch and note). Usage is summed over the AIMessages of the final ``messages``.

    Under a checkpointer a compiled agent graph runs as a subgraph of the PaCoRe graph and checkpoints
    its own steps, so a resumed run continues a half-done episode. That suits agents whose whole state
    is in the graph; an agent with outside state (a sandbox) must run each episode in a fresh
    ``contextvars.Context()`` so that it starts over instead (see ``pacore_agents.swe.episodes``).
    """

    def __init__(
        self,
        runnable: Runnable,
        *,
        output: Callable[[Any], AIMessage | str],
        input: Callable[[list[BaseMessage]], Any] | None = None,
        config: RunnableConfig | None = None,
    ):
        self.runnable = runnable
        self.output = output
        self.input = input or _default_input
        self.config = config

    async def explore(self, messages: list[BaseMessage], *, round_index: int, index: int) -> Trajectory:
        config: RunnableConfig = {**(self.config or {})}
        config["metadata"] = {**config.get("metadata", {}), "pacore_round": round_index, "pacore_index": index}
        state = await self.runnable.ainvoke(self.input(messages), config)
        result = self.output(state)
        message = result if isinstance(result, AIMessage) else AIMessage(content=str(result))
        trajectory = trajectory_from_message(message, extra={"state": state})
        prompt, completion = _episode_usage(state)
        if completion is not None:
            trajectory.prompt_tokens, trajectory.completion_tokens = prompt, completion
        return trajectory


def _episode_usage(state: Any) -> tuple[int | None, int | None]:
    messages = state.get("messages") if isinstance(state, dict) else None
    if not messages:
        return None, None
    prompt = completion = 0
    seen = False
    for message in messages:
        usage = getattr(message, "usage_metadata", None)
        if usage:
            seen = True
            prompt += usage.get("input_tokens", 0)
            completion += usage.get("output_tokens", 0)
    return (prompt, completion) if seen else (None, None)


def as_explorer(model_or_explorer: Any, config: PaCoReConfig) -> Explorer:
    """Accept a chat model, an Explorer, or a compiled graph / Runnable with a ``messages`` output."""
    if isinstance(model_or_explorer, BaseChatModel):
        return ChatExplorer(model_or_explorer, config)
    if isinstance(model_or_explorer, Explorer):
        return model_or_explorer
    if isinstance(model_or_explorer, Runnable):
        return AgentExplorer(model_or_explorer, output=lambda state: state["messages"][-1])
    raise TypeError(
        "PaCoRe needs a LangChain chat model, an Explorer, or a Runnable/compiled graph; "
        f"got {type(model_or_explorer).__name__}"
    )
