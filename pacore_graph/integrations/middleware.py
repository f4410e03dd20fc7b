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
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Context, copy_context
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import set_config_context
from langgraph.config import get_config

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import CANCEL_GRACE_SECONDS, CancelScope, cancel_scope, run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.chat import trajectory_from_message
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.graph.own_thread import lent_saver
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.integrations.chat_model import final_trajectory
from pacore_graph.models.calls import as_pacore_calls_it
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
    """One trajectory = one call of the middleware's handler on the round's messages (one explorer per call);
    ``model``, a panel's model for the slots it explores, in place of the request's."""

    def __init__(self, call: _ModelCall, model: BaseChatModel | None = None):
        self.call = call
        self.model = model

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        call = self.call
        # the agent's own messages (AnyMessage), the last user message replaced by a HumanMessage after round 1
        request = call.request.override(messages=messages)  # type: ignore[arg-type]
        if self.model is not None:  # a panel's model: the handler binds the request's tools on it (its own)
            request = request.override(model=self.model)
        # The model node's callbacks, not the PaCoRe graph's: LangGraph keeps its messages-stream handler out of a
        # graph run detached from the agent's, and the final synthesis must stream as the agent's model node.
        trajectory = episode.runnable_config
        step: RunnableConfig = {
            **call.node_config,
            "tags": [*call.node_config.get("tags", ()), *trajectory.get("tags", ())],
            "metadata": {**call.node_config.get("metadata", {}), **trajectory.get("metadata", {})},
        }
        with set_config_context(step) as context:  # the handler's model call reads its config from there
            if call.is_async:

                async def handle() -> Any:
                    return await call.handler(request)

                response = await asyncio.get_running_loop().create_task(handle(), context=context)
            else:
                response = await in_thread(call.handler, request, context=context)
        model_response = response.model_response if isinstance(response, ExtendedModelResponse) else response
        if isinstance(model_response, AIMessage):
            model_response = ModelResponse(result=[model_response])
        message = next(m for m in model_response.result if isinstance(m, AIMessage))
        return trajectory_from_message(message, {"response": response})


async def in_thread(function: Callable[..., Any], *args: Any, context: Context | None = None) -> Any:
    """``function(*args)`` in a thread of its own (K sync model calls at once, not a pool of a few), in a copy
    of ``context`` (by default this one). A caller cancelled while it waits (a timeout, say) cancels what the
    call runs through :func:`~pacore_graph.concurrency.sync.run_sync` (this project's chat models: their
    requests are closed; a ChatOpenAI's own timeout, which the middleware sets to PaCoRe's, closes its
    request) and waits for the thread to end before it goes on, so a retry never runs beside the call it
    replaces."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    ended = asyncio.Event()
    context = context.copy() if context is not None else copy_context()
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

    A panel (``config.panel``): ``models`` maps the panel's names to chat models; a name it leaves out (one at
    most) is the agent's own model. Each trajectory's request then goes to its slot's model, which the handler
    binds the request's tools on.
    """

    def __init__(self, config: PaCoReConfig | None = None, *, models: Mapping[str, BaseChatModel] | None = None):
        super().__init__()
        self.config = config or PaCoReConfig()
        self.limiter = ConcurrencyLimiter(self.config.max_concurrency)  # one bound for all its model calls
        self.models = dict(models or {})
        panel = self.config.panel
        if panel is None and self.models:
            raise ValueError("models by name need a panel in the config (PaCoReConfig(panel=...))")
        self.agent_model = None if panel is None else panel_agent_model(panel.models, self.models)
        self.models = {
            name: as_pacore_calls_it(model, self.config.request_timeout) for name, model in self.models.items()
        }

    def _runner(self, call: _ModelCall) -> PaCoReRunner:
        """The PaCoRe graph over this call's handler (its explorer): compiling one takes about half a millisecond,
        next to the sum(K) + 1 model calls it makes."""
        if self.config.panel is None:
            return PaCoReRunner(HandlerExplorer(call), self.config, limiter=self.limiter)
        explorers: dict[str, Any] = {name: HandlerExplorer(call, model) for name, model in self.models.items()}
        if self.agent_model is not None:
            explorers[self.agent_model] = HandlerExplorer(call)
        return PaCoReRunner(explorers, self.config, limiter=self.limiter)

    async def _run(self, request: ModelRequest, handler: Callable[..., Any], *, is_async: bool) -> Any:
        try:
            node_config = get_config()  # the agent's model node's
        except RuntimeError:  # called outside an agent
            node_config = {}
        model = as_pacore_calls_it(request.model, self.config.request_timeout)
        if model is not request.model:  # a ChatOpenAI: no retries of its own, and its own timeout closes a hung call
            request = request.override(model=model)
        call = _ModelCall(request, handler, node_config, is_async)
        run_config: RunnableConfig = {
            "callbacks": node_config.get("callbacks"),
            "metadata": node_config.get("metadata") or {},
        }
        if lent_saver(node_config) is not None:  # durable: the run keeps a thread of its own with the agent's saver
            run_config["configurable"] = node_config["configurable"]
        # One model step is one PaCoRe run, not a subgraph: its ambient config is its own, as LangChain sets a child's.
        with set_config_context(run_config) as context:
            run = self._runner(call).arun(request.messages, run_config, trace=True)
            result = await asyncio.get_running_loop().create_task(run, context=context)
        return final_response(result)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        return run_sync(self._run(request, handler, is_async=False))

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]) -> Any:
        return await self._run(request, handler, is_async=True)


def panel_agent_model(names: Mapping[str, object], given: Mapping[str, object]) -> str | None:
    """The panel name left to the agent's own model (None when ``given`` names them all); unknown names, or
    more than one left out, are refused in one line."""
    unknown = [name for name in given if name not in names]
    if unknown:
        raise ValueError(f"models {', '.join(unknown)} are not in the panel ({', '.join(names)})")
    left = [name for name in names if name not in given]
    if len(left) > 1:
        raise ValueError(
            f"the panel's {', '.join(left)} have no model: give them in models= (one may be left to the agent's)"
        )
    return left[0] if left else None


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
        m.model_copy(
            update={
                "content": answer.content,
                "usage_metadata": answer.usage_metadata,
                "response_metadata": {**m.response_metadata, "pacore": answer.response_metadata["pacore"]},
            }
        )
        if isinstance(m, AIMessage)
        else m
        for m in model_response.result
    ]
    updated = ModelResponse(result=messages, structured_response=model_response.structured_response)
    if isinstance(response, ExtendedModelResponse):
        return ExtendedModelResponse(model_response=updated, command=response.command)
    return updated
