"""``PaCoReMiddleware``: an agent's model calls become PaCoRe runs (LangChain ``create_agent``, deep agents).

Each proposal and the synthesis is one call of the ``handler`` the middleware receives, with the request's
messages replaced by that round's (round 1: unchanged; later rounds: the last user message replaced by the
synthesis prompt). So everything inside it - middleware later in the list, the tools, ``tool_choice``,
``response_format``, system message and model settings of the request, and the model - sees and shapes every
trajectory; middleware earlier in the list wraps the whole PaCoRe run and sees one model call.

The agent gets the final trajectory's response: its message (text compacted as PaCoRe compacts it, tool calls,
structured response) with ``usage_metadata`` counting every trajectory and ``response_metadata["pacore"]``.
Under ``stream_mode="messages"`` only the final synthesis streams, as the agent's model node.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

from pacore_graph.concurrency.sync import CANCEL_GRACE_SECONDS, CancelScope, cancel_scope, run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.chat import as_pacore_calls_it, trajectory_from_message
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.graph.own_thread import lent_saver
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.integrations.chat_model import final_trajectory
from pacore_graph.records import PaCoReResult, Trajectory


@dataclass(frozen=True)
class _ModelCall:
    """One wrapped model call: the request, the handler to run each trajectory through, and the model node's
    config (each trajectory's model call runs under it, with the trajectory's callbacks, tags and metadata)."""

    request: ModelRequest
    handler: Callable[[ModelRequest], Any]
    node_config: RunnableConfig
    is_async: bool


class HandlerExplorer:
    """One trajectory = one call of the middleware's handler on the round's messages."""

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        call: _ModelCall = episode.payload
        # the agent's own messages (AnyMessage), the last user message replaced by a HumanMessage after round 1
        request = call.request.override(messages=messages)  # type: ignore[arg-type]
        # The model node's callbacks, not the PaCoRe graph's: LangGraph keeps its messages-stream handler out of a
        # graph run detached from the agent's, and the final synthesis must stream as the agent's model node.
        config: RunnableConfig = {
            **call.node_config,
            "tags": [*call.node_config.get("tags", ()), *episode.config.get("tags", ())],
            "metadata": {**call.node_config.get("metadata", {}), **episode.config.get("metadata", {})},
        }
        token = var_child_runnable_config.set(config)  # the handler's model call reads its config from here
        try:
            if call.is_async:
                response = await call.handler(request)
            else:
                response = await in_thread(call.handler, request)
        finally:
            var_child_runnable_config.reset(token)
        model_response = response.model_response if isinstance(response, ExtendedModelResponse) else response
        if isinstance(model_response, AIMessage):
            model_response = ModelResponse(result=[model_response])
        message = next(m for m in model_response.result if isinstance(m, AIMessage))
        return trajectory_from_message(message, {"response": response})


async def in_thread(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a thread of its own (K sync model calls at once, not a pool of a few), in a copy
    of this context. A caller cancelled while it waits (a timeout, say) cancels what the call runs through
    :func:`~pacore_graph.concurrency.sync.run_sync` (this project's chat models: their requests are closed; a
    ChatOpenAI's own timeout, which the middleware sets to PaCoRe's, closes its request) and waits for the
    thread to end before it goes on, so a retry never runs beside the call it replaces."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    ended = asyncio.Event()
    context = copy_context()
    scope = CancelScope()
    cancel_scope(context, scope)

    def settle(method: Callable[[Any], None], value: Any) -> None:
        if not future.done():
            method(value)

    def work() -> None:
        try:
            result = context.run(function, *args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome: tuple[Callable[[Any], None], Any] = (future.set_exception, exc)
        else:
            outcome = (future.set_result, result)
        with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)
            loop.call_soon_threadsafe(ended.set)

    threading.Thread(target=work, name="pacore-handler", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        scope.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), CANCEL_GRACE_SECONDS)
        raise


class PaCoReMiddleware(AgentMiddleware):
    """Makes each model call of a ``create_agent`` agent one PaCoRe run (sum(K) proposals, then a synthesis),
    every one of them through the handler this middleware receives.

    Its place in ``middleware=[...]`` decides what it wraps: middleware after it (retries, fallbacks, call
    limits, caching, summarization, ...) runs once per trajectory; middleware before it runs once per model step
    and sees the PaCoRe answer.
    """

    def __init__(self, config: PaCoReConfig | None = None):
        super().__init__()
        self.config = config or PaCoReConfig()
        self.runner = PaCoReRunner(HandlerExplorer(), self.config)

    async def _run(self, request: ModelRequest, handler: Callable[..., Any], *, is_async: bool) -> Any:
        node_config = var_child_runnable_config.get() or {}
        model = as_pacore_calls_it(request.model, self.config.request_timeout)
        if model is not request.model:  # a ChatOpenAI: no retries of its own, and its own timeout closes a hung call
            request = request.override(model=model)
        call = _ModelCall(request, handler, node_config, is_async)
        config: RunnableConfig = {
            "callbacks": node_config.get("callbacks"), "metadata": node_config.get("metadata") or {}
        }
        if lent_saver(node_config) is not None:  # durable: the run keeps a thread of its own with the agent's saver
            config["configurable"] = node_config["configurable"]
        detached = var_child_runnable_config.set(None)  # one model step is one PaCoRe run, not a subgraph
        try:
            result = await self.runner.arun(request.messages, config, payload=call, trace=True)
        finally:
            var_child_runnable_config.reset(detached)
        return final_response(result)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        return run_sync(self._run(request, handler, is_async=False))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        return await self._run(request, handler, is_async=True)


def final_response(result: PaCoReResult) -> Any:
    """The chosen trajectory's response, its message carrying the answer text and the whole run's account."""
    final = final_trajectory(result)
    assert final is not None, "a finished run has the trajectory its answer came from"
    response = final.extra["response"]
    model_response = response.model_response if isinstance(response, ExtendedModelResponse) else response
    if isinstance(model_response, AIMessage):
        model_response = ModelResponse(result=[model_response])
    answer = result.message
    messages = [
        m.model_copy(update={
            "content": answer.content,
            "usage_metadata": answer.usage_metadata,
            "response_metadata": {**m.response_metadata, "pacore": answer.response_metadata["pacore"]},
        }) if isinstance(m, AIMessage) else m
        for m in model_response.result
    ]  # fmt: skip
    updated = ModelResponse(result=messages, structured_response=model_response.structured_response)
    if isinstance(response, ExtendedModelResponse):
        return ExtendedModelResponse(model_response=updated, command=response.command)
    return updated
