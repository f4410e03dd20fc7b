"""``PaCoReChatModel``: PaCoRe wherever LangChain takes a chat model (agents, supervisors, LCEL chains).

Every call (``invoke``, ``stream``, ``batch``, their async forms) is one PaCoRe run over ``model``, on the same
runner as :class:`~pacore_graph.graph.node.PaCoReNode`: sum(K) proposals, then one synthesis. The reply is the final
trajectory's message (text, reasoning in ``additional_kwargs["reasoning_content"]``, tool calls) with
``usage_metadata`` counting every trajectory and ``response_metadata["pacore"]`` holding the rounds.

Callbacks: this model's run is the parent of every proposal and synthesis, each a chat-model run of its own
that callbacks and LangSmith see with the caller's tags and metadata (plus ``pacore_round`` /
``pacore_index``). They are tagged ``nostream``, so a LangGraph messages stream shows only this model's
tokens: the final synthesis's, as the server sends them. A usage callback that adds up every chat-model run
counts the tokens twice (each trajectory, then this run's total).

One call is one run, not a subgraph. Inside a checkpointed graph (an agent compiled with a saver) the run
checkpoints with that saver on a thread of its own, deleted once it answers: a resumed step, or a call retried
with the same messages, sends only the trajectories not yet finished (:mod:`pacore_graph.graph.own_thread`).
Sync calls run on the background loop of :mod:`pacore_graph.concurrency.sync` (safe inside a running event
loop). Tools: ``bind_tools`` binds them on ``model`` for every trajectory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    BaseCallbackManager,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.constants import TAG_NOSTREAM
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, SkipValidation

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import iterate_sync, run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.graph.node import enclosing_graph
from pacore_graph.graph.own_thread import lent_saver
from pacore_graph.graph.runner import PaCoReRunner, chosen_trajectory
from pacore_graph.integrations.final_tokens import FinalRoundTokens
from pacore_graph.models.structured import StructuredOutputMixin
from pacore_graph.models.unwrap import WrappedChatModel, find_chat_model, with_model
from pacore_graph.records import PaCoReResult, Trajectory

CACHED_RUNNERS = 32  # compiled PaCoRe graphs kept per model: one per distinct set of call arguments (tools, ...)
_DONE = object()


class OwnRun(BaseCallbackHandler):
    """Learns the id of this model's run, for streaming calls: LangChain hands ``_stream`` / ``_astream`` no run
    manager, yet the trajectories' runs belong under this one, with its inheritable callbacks."""

    run_inline = True

    def __init__(self, manager: BaseCallbackManager):
        self.manager = manager
        self.run_id: UUID | None = None

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.run_id = self.run_id or run_id


_OWN_RUN: ContextVar[OwnRun | None] = ContextVar("pacore_own_run", default=None)


def _with_own_run(config: RunnableConfig | None) -> tuple[RunnableConfig, OwnRun]:
    """The config with a probe of this model's run among its callbacks (for this run only, not inherited)."""
    config = ensure_config(config)
    callbacks = config.get("callbacks")
    manager = callbacks.copy() if isinstance(callbacks, BaseCallbackManager) else CallbackManager.configure(callbacks)
    probe = OwnRun(manager)
    manager.add_handler(probe, inherit=False)
    return {**config, "callbacks": manager}, probe


class PaCoReChatModel(StructuredOutputMixin, BaseChatModel):
    """A chat model whose every call is one PaCoRe run over ``model`` (any chat model, wrapped or not).

    LangChain's standard arguments apply to every trajectory: ``temperature``, ``top_p``, ``max_tokens`` and
    ``stop`` are bound on ``model`` (they win over PaCoReConfig's sampling); ``timeout`` is seconds per
    request (``PaCoReConfig.request_timeout``), ``max_retries`` the retries of a failed trajectory;
    ``api_key`` replaces the key of ``model`` (one with an ``api_key`` field); ``streaming=True`` makes
    ``invoke`` stream the final synthesis to callbacks.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    # Checked by model_post_init (a chat model, bare or wrapped), which says what to pass instead in one line.
    model: SkipValidation[Runnable[Any, Any]] = Field(
        description="the chat model every trajectory calls (bound tools and wrappers kept)"
    )
    config: PaCoReConfig = Field(default_factory=PaCoReConfig, description="rounds, sampling, retries, ...")
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    timeout: float | None = Field(None, description="seconds per trajectory request (PaCoReConfig.request_timeout)")
    max_retries: int | None = Field(None, ge=0, description="retries of a failed trajectory (PaCoReConfig.retry)")
    api_key: SecretStr | None = Field(None, repr=False, exclude=True, description="the key of the wrapped model")
    streaming: bool = False

    _found: WrappedChatModel = PrivateAttr()
    _base: Any = PrivateAttr()  # ``model`` with the api key applied
    _binds: dict[str, Any] = PrivateAttr(default_factory=dict)
    _settings: PaCoReConfig = PrivateAttr()
    _limiter: ConcurrencyLimiter = PrivateAttr()
    _runners: dict[str, PaCoReRunner] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        found = find_chat_model(self.model)
        if found is None:
            raise TypeError(
                f"PaCoReChatModel runs over a chat model, not {type(self.model).__name__}: pass a BaseChatModel "
                "(bound or wrapped); whole agent episodes go to PaCoReNode with an AgentExplorer"
            )
        self._found = found
        self._base = self.model if self.api_key is None else _with_api_key(found, self.api_key)
        binds = {name: getattr(self, name) for name in ("temperature", "top_p", "max_tokens", "stop")}
        self._binds = {name: value for name, value in binds.items() if value not in (None, [])}
        if self._binds and found.prefix is not None:
            raise ValueError(
                f"{sorted(self._binds)} cannot be bound on a chain ending in a model: bind them on the model itself"
            )
        update: dict[str, Any] = {}
        if self.timeout is not None:
            update["request_timeout"] = self.timeout
        if self.max_retries is not None:
            update["retry"] = self.config.retry.model_copy(update={"max_attempts": self.max_retries + 1})
        self._settings = self.config.model_copy(update=update) if update else self.config
        self._limiter = ConcurrencyLimiter(self._settings.max_concurrency)
        if self.profile is None:
            self.profile = found.model.profile

    # ---- what LangChain reads off a chat model -------------------------------------------------------

    @property
    def _llm_type(self) -> str:
        return "pacore"

    @property
    def model_name(self) -> str:
        """The wrapped model's name (LangChain's agent factory reads it to pick a structured-output strategy)."""
        inner = self._found.model
        name = getattr(inner, "model_name", None) or getattr(inner, "model", None)
        return name if isinstance(name, str) and name else "pacore"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model_name, "rounds": self._settings.schedule}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """Provider "pacore": this run's usage is the sum of its trajectories', each traced under its provider."""
        params = LangSmithParams(ls_provider="pacore", ls_model_name=kwargs.get("model") or self.model_name,
                                 ls_model_type="chat")  # fmt: skip
        temperature = kwargs.get("temperature", self.temperature)
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if temperature is not None:
            params["ls_temperature"] = temperature
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Every trajectory is offered ``tools`` (bound on ``model`` by its own ``bind_tools``, so ``tool_choice``
        means what it means there: "any", a tool's name, ...); conclusions carry their calls to the next round
        and the answer carries the final trajectory's."""
        if not hasattr(self._base, "bind_tools"):
            raise TypeError(f"{type(self._found.model).__name__} has no bind_tools: PaCoRe cannot offer it tools")
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        self._base.bind_tools(formatted, **kwargs)  # refuses a bad tool_choice now, before a run is spent
        return self.bind(tools=formatted, **kwargs)

    # ---- entry points: as BaseChatModel's, with this run known to streaming calls ---------------------

    def invoke(self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any) -> AIMessage:
        config, probe = _with_own_run(config)
        token = _OWN_RUN.set(probe)
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _OWN_RUN.reset(token)

    async def ainvoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AIMessage:
        config, probe = _with_own_run(config)
        token = _OWN_RUN.set(probe)
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _OWN_RUN.reset(token)

    def stream(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[AIMessageChunk]:
        config, probe = _with_own_run(config)
        token = _OWN_RUN.set(probe)
        try:
            yield from super().stream(input, config, **kwargs)
        finally:
            _reset(token)

    async def astream(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[AIMessageChunk]:
        config, probe = _with_own_run(config)
        token = _OWN_RUN.set(probe)
        try:
            async for chunk in super().astream(input, config, **kwargs):
                yield chunk
        finally:
            _reset(token)

    # ---- one call = one PaCoRe run -------------------------------------------------------------------

    def _runner(self, stop: list[str] | None, kwargs: dict[str, Any]) -> PaCoReRunner:
        """The compiled PaCoRe graph over ``model`` with this call's arguments bound (tools, response format,
        stop, a model override, ...), kept for the next call with the same arguments."""
        call = {key: value for key, value in kwargs.items() if key not in ("stream", "run_manager")}
        if stop:
            call["stop"] = stop
        key = json.dumps(call, sort_keys=True, default=repr)
        runner = self._runners.get(key)
        if runner is None:
            model = self._base
            tools = call.pop("tools", None)
            if tools is not None:
                model = model.bind_tools(tools, **call)
                call = {}
            binds = {**self._binds, **call}
            if binds:
                model = model.bind(**binds)
            runner = PaCoReRunner(model, self._settings, limiter=self._limiter)
            if len(self._runners) >= CACHED_RUNNERS:
                self._runners.pop(next(iter(self._runners)))
            self._runners[key] = runner
        return runner

    async def _run(
        self,
        messages: list[BaseMessage],
        runner: PaCoReRunner,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None,
        tokens: FinalRoundTokens | None = None,
    ) -> PaCoReResult:
        """One PaCoRe run, its model calls children of this model's run, detached from any enclosing graph
        (its progress events still go to that graph's custom stream; it checkpoints with that graph's saver)."""
        enclosing = enclosing_graph()
        caller = var_child_runnable_config.get()
        callbacks = child_callbacks(run_manager)
        if tokens is not None:
            callbacks.add_handler(tokens, inherit=True)
        outer = callbacks.inheritable_metadata
        config: RunnableConfig = {
            "callbacks": callbacks,
            "tags": [TAG_NOSTREAM],  # the answer streams as this model's tokens, not as the final call's too
            "metadata": {key: value for key, value in outer.items() if key.startswith("langgraph_")},
        }
        if caller is not None and lent_saver(caller) is not None:
            config["configurable"] = caller["configurable"]  # the runner keeps the saver and thread, no more
        detached = var_child_runnable_config.set(None)
        try:
            return await runner.arun(messages, config, trace=True, **enclosing)
        finally:
            var_child_runnable_config.reset(detached)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None = None,  # sync: from _generate
        **kwargs: Any,
    ) -> ChatResult:
        result = await self._run(messages, self._runner(stop, kwargs), run_manager)
        return ChatResult(generations=[ChatGeneration(message=reply_message(result))])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return run_sync(self._agenerate(messages, stop, run_manager, **kwargs))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The final synthesis's tokens as they arrive, then a last chunk with the usage of every trajectory
        and the rounds (the whole answer there, when nothing streamed: a selector chose it, say)."""
        runner = self._runner(stop, kwargs)
        received: asyncio.Queue[Any] = asyncio.Queue()
        tokens = FinalRoundTokens(len(self._settings.schedule) - 1, received.put_nowait)

        async def run() -> PaCoReResult:
            try:
                return await self._run(messages, runner, run_manager, tokens)
            finally:
                received.put_nowait(_DONE)

        task = asyncio.ensure_future(run())
        try:
            while (chunk := await received.get()) is not _DONE:
                yield ChatGenerationChunk(message=chunk)
            result = await task
        finally:
            task.cancel()
        yield ChatGenerationChunk(message=last_chunk(reply_message(result), whole=tokens.sent == 0))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from iterate_sync(self._astream(messages, stop, run_manager, **kwargs))


def child_callbacks(
    run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None,
) -> AsyncCallbackManager:
    """Callbacks for runs under this model's run: its inheritable handlers, tags and metadata (a model's run
    manager has no ``get_child``: model runs are usually leaves). A streaming call has no run manager: its run is
    the one :class:`OwnRun` saw start."""
    source: Any = run_manager
    parent = run_manager.run_id if run_manager is not None else None
    if source is None and (probe := _OWN_RUN.get()) is not None:
        source, parent = probe.manager, probe.run_id
    manager = AsyncCallbackManager(handlers=[], parent_run_id=parent)
    if source is not None:
        manager.set_handlers(source.inheritable_handlers)
        manager.add_tags(source.inheritable_tags)
        manager.add_metadata(source.inheritable_metadata)
    return manager


def _reset(token: Any) -> None:
    """Reset a context variable set in a generator, unless the generator is closed from another context."""
    try:
        _OWN_RUN.reset(token)
    except ValueError:
        pass


def reply_message(result: PaCoReResult) -> AIMessage:
    """The final trajectory's message: the answer's text and tool calls, that trajectory's reasoning, the usage of
    every trajectory and the run's account (as PaCoReNode's answer)."""
    answer = result.message
    additional: dict[str, Any] = {}
    if reasoning := final_reasoning(result):
        additional["reasoning_content"] = reasoning
    return AIMessage(
        content=answer.content,
        additional_kwargs=additional,
        tool_calls=answer.tool_calls,
        response_metadata=answer.response_metadata,
        usage_metadata=answer.usage_metadata,
    )


def final_trajectory(result: PaCoReResult) -> Trajectory | None:
    """The whole trajectory (from the run's trace) whose conclusion is the answer."""
    chosen = chosen_trajectory(result.rounds, result.outcome)
    if chosen is None:
        return None
    wanted = (chosen.round_index, chosen.index)
    found = (t for t in result.trajectories or () if (t.extra.get("round_index"), t.extra.get("index")) == wanted)
    return next(found, None)


def final_reasoning(result: PaCoReResult) -> str | None:
    final = final_trajectory(result)
    return final.reasoning if final is not None else None


def last_chunk(reply: AIMessage, *, whole: bool) -> AIMessageChunk:
    """The stream's last chunk: usage and metadata; with ``whole``, the answer itself too."""
    pieces: dict[str, Any] = {"content": ""}
    if whole:
        calls = [
            {"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": position}
            for position, call in enumerate(reply.tool_calls)
        ]
        pieces = {"content": reply.content, "additional_kwargs": reply.additional_kwargs, "tool_call_chunks": calls}
    return AIMessageChunk(
        **pieces,
        usage_metadata=reply.usage_metadata,
        response_metadata=reply.response_metadata,
        chunk_position="last",
    )


def _with_api_key(found: WrappedChatModel, key: SecretStr) -> Runnable[Any, Any]:
    """The wrapped model rebuilt with another API key (its client is made at construction)."""
    inner = found.model
    fields = type(inner).model_fields
    name = next((name for name, info in fields.items() if "api_key" in (name, info.alias)), None)
    if name is None:
        raise TypeError(f"api_key: {type(inner).__name__} takes no api_key; give the key to the model itself")
    values = {field: getattr(inner, field) for field in inner.model_fields_set}
    values[name] = key.get_secret_value()
    rebuilt = type(inner).model_validate(values)
    if found.prefix is not None:
        raise ValueError("api_key cannot be set on a chain ending in a model: set it on the model itself")
    return with_model(found.call, rebuilt)
