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

All of it on LangChain's public callback API: every road into the model reaches :meth:`_agenerate` (or the
protocol hook) with the model's run manager, whose handlers the trajectories' runs inherit; its tokens are the
final trajectory's, told to this run's handlers as ``on_llm_new_token``. There is no ``_astream`` (LangChain calls
it without the run manager); ``astream`` and ``stream`` listen to their own call's run instead.

One call is one run, not a subgraph. Inside a checkpointed graph (an agent compiled with a saver) the run
checkpoints with that saver on a thread of its own, deleted once it answers: a resumed step, or a call retried
with the same messages, sends only the trajectories not yet finished (:mod:`pacore_graph.graph.own_thread`).
Sync calls run on the background loop of :mod:`pacore_graph.concurrency.sync` (safe inside a running event
loop). Tools: ``bind_tools`` binds them on ``model`` for every trajectory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.language_models._compat_bridge import achunks_to_events
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import set_config_context
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.utils import LC_ID_PREFIX
from langchain_core.utils.uuid import uuid7
from langgraph.constants import TAG_NOSTREAM
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, SkipValidation

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import iterate_sync, run_sync
from pacore_graph.config import PaCoReConfig
from pacore_graph.explorers.agent import with_handler
from pacore_graph.explorers.panel import panel_models
from pacore_graph.graph.node import enclosing_graph
from pacore_graph.graph.own_thread import lent_saver
from pacore_graph.graph.runner import PaCoReRunner, chosen_trajectory
from pacore_graph.integrations.final_tokens import FinalRoundTokens, RunTokens
from pacore_graph.models.structured import StructuredOutputMixin
from pacore_graph.models.tool_choice import strict_tools
from pacore_graph.models.unwrap import WrappedChatModel, find_chat_model, with_model
from pacore_graph.records import PaCoReResult, Trajectory

if TYPE_CHECKING:
    from langchain_protocol.protocol import MessagesData  # langchain-core's own dependency

CACHED_RUNNERS = 32  # compiled PaCoRe graphs kept per model: one per distinct set of call arguments (tools, ...)
_DONE = object()


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
        None,  # type: ignore[arg-type]  # a panel's synthesiser stands in (see model_post_init)
        description="the chat model every trajectory calls (bound tools and wrappers kept); with ``models``, "
        "optional: the panel's synthesiser",
    )
    models: SkipValidation[Mapping[str, Runnable[Any, Any]]] | None = Field(
        None,
        exclude=True,
        description="a panel's chat models by the names config.panel gives them (each with its own key and tools)",
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
    _config: PaCoReConfig = PrivateAttr()
    _limiter: ConcurrencyLimiter = PrivateAttr()
    _runners: dict[Hashable, PaCoReRunner] = PrivateAttr(default_factory=dict)  # least recently used first

    def model_post_init(self, context: Any) -> None:
        if self.models is not None:
            panel_models(self.models, self.config)  # the names match the config's panel, or one line says why
            if self.api_key is not None:
                raise ValueError("api_key replaces one model's key: a panel's models each carry their own")
            if self.model is None:
                assert self.config.panel is not None  # panel_models refused models without a panel
                self.model = self.models[self.config.panel.final_model]
        elif self.model is None:
            raise ValueError("PaCoReChatModel needs model=... (or a panel's models=... with config.panel)")
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
        self._config = self.config.model_copy(update=update) if update else self.config
        self._limiter = ConcurrencyLimiter(self._config.max_concurrency)
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
        return {"model": self.model_name, "rounds": self._config.schedule}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """Provider "pacore": this run's usage is the sum of its trajectories', each traced under its provider."""
        params = LangSmithParams(
            ls_provider="pacore", ls_model_name=kwargs.get("model") or self.model_name, ls_model_type="chat"
        )
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
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Every trajectory is offered ``tools`` (bound on ``model`` by its own ``bind_tools``, so ``tool_choice``
        and ``strict`` mean what they mean there: "any", a tool's name, ...); conclusions carry their calls to the
        next round and the answer carries the final trajectory's. ``strict`` is written into each tool here too:
        the tools reach ``model`` in OpenAI form, which LangChain's formatting leaves as it is."""
        if not hasattr(self._base, "bind_tools"):
            raise TypeError(f"{type(self._found.model).__name__} has no bind_tools: PaCoRe cannot offer it tools")
        formatted = [convert_to_openai_tool(tool, strict=strict) for tool in tools]
        if strict is not None:
            formatted = strict_tools(formatted, strict)
            kwargs["strict"] = strict
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        self._base.bind_tools(formatted, **kwargs)  # refuses a bad tool_choice now, before a run is spent
        return self.bind(tools=formatted, **kwargs)

    # ---- token streaming to a direct caller ---------------------------------------------------------

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """The final synthesis's tokens as the server sends them, then a last chunk with the usage of every
        trajectory and the rounds (the whole answer there, when nothing streamed: a selector chose it, say).

        Why not LangChain's own ``astream``: this model's tokens are those its final trajectory's model call streams
        to this model's run (``on_llm_new_token``, see :meth:`_agenerate`), not a request of its own, so it has no
        ``_astream`` and LangChain's ``astream`` would wait for the whole reply. This one runs ``ainvoke`` with a
        handler of LangChain's callback API that listens to this call's run alone (its id chosen up front, as
        ``RunnableConfig["run_id"]`` allows) and yields what it hears."""
        config = ensure_config(config)
        run_id = config.get("run_id") or uuid7()
        received: asyncio.Queue[Any] = asyncio.Queue()
        listener = RunTokens(received.put_nowait, [run_id])
        call: RunnableConfig = {
            **config,
            "run_id": run_id,
            "callbacks": with_handler(config.get("callbacks"), listener, inherit=False),
        }
        task = asyncio.ensure_future(self.ainvoke(input, call, stop=stop, stream=True, **kwargs))
        task.add_done_callback(lambda _: received.put_nowait(_DONE))
        try:
            while (chunk := await received.get()) is not _DONE:
                yield chunk
            reply = await task
        finally:
            task.cancel()
        if not listener.sent:  # streaming disabled: the whole reply as one chunk, as LangChain's astream gives it
            yield last_chunk(reply, whole=True)

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """Sync :meth:`astream`, on the background loop of :mod:`pacore_graph.concurrency.sync`."""
        yield from iterate_sync(self.astream(input, config, stop=stop, **kwargs))

    # ---- one call = one PaCoRe run -------------------------------------------------------------------

    def _runner(self, stop: list[str] | None, kwargs: dict[str, Any]) -> PaCoReRunner:
        """The compiled PaCoRe graph over ``model`` with this call's arguments bound (tools, response format,
        stop, a model override, ...), kept for the next call with the same arguments (see :func:`runner_key`)."""
        call = {key: value for key, value in kwargs.items() if key not in ("stream", "run_manager")}
        if stop:
            call["stop"] = stop
        key = runner_key(call)
        runner = self._runners.pop(key, None) if key is not None else None
        if runner is None:
            tools = call.pop("tools", None)
            binds = {**self._binds, **call} if tools is None else self._binds

            def bound(model: Any) -> Any:
                if tools is not None:
                    model = model.bind_tools(tools, **call)
                return model.bind(**binds) if binds else model

            # a panel: each of its models is offered the tools and bound with the arguments (its own tool calling)
            models = {name: bound(m) for name, m in self.models.items()} if self.models is not None else None
            runner = PaCoReRunner(models or bound(self._base), self._config, limiter=self._limiter)
        if key is not None:
            self._runners[key] = runner
            while len(self._runners) > CACHED_RUNNERS:
                self._runners.pop(next(iter(self._runners)), None)  # the least recently used
        return runner

    async def _run(
        self,
        messages: list[BaseMessage],
        runner: PaCoReRunner,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None,
        tokens: FinalRoundTokens | None = None,
    ) -> PaCoReResult:
        """One PaCoRe run, its model calls children of this model's run, a run of its own rather than a subgraph
        of an enclosing graph (its progress events still go to that graph's custom stream; it checkpoints with
        that graph's saver)."""
        enclosing = enclosing_graph()
        caller = ensure_config()  # the enclosing node's config, if any: its saver
        callbacks = child_callbacks(run_manager)
        if tokens is not None:
            callbacks.add_handler(tokens, inherit=True)
        outer = callbacks.inheritable_metadata
        run_config: RunnableConfig = {
            "callbacks": callbacks,
            "tags": [TAG_NOSTREAM],  # the answer streams as this model's tokens, not as the final call's too
            "metadata": {key: value for key, value in outer.items() if key.startswith("langgraph_")},
        }
        if lent_saver(caller) is not None:
            run_config["configurable"] = caller["configurable"]  # the runner keeps the saver and thread, no more
        # The run's ambient config is its own, as LangChain sets a child's: LangGraph then sees no enclosing graph.
        with set_config_context(run_config) as context:
            run = runner.arun(messages, run_config, trace=True, **enclosing)
            return await asyncio.get_running_loop().create_task(run, context=context)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None = None,  # sync: from _generate
        **kwargs: Any,
    ) -> ChatResult:
        """One PaCoRe run under this model's run. When the call streams (``stream=True``, ``streaming=True``, or a
        handler that streams tokens is attached: a LangGraph messages stream, ``astream_events``), the final
        round's tokens reach this run's handlers as they arrive, each as one of this run's tokens
        (``on_llm_new_token``), and a last chunk carries the usage of every trajectory and the rounds."""
        runner = self._runner(stop, kwargs)
        if run_manager is None or not self._streams(kwargs, run_manager):
            result = await self._run(messages, runner, run_manager)
            return ChatResult(generations=[ChatGeneration(message=reply_message(result))])
        reply = None
        async for piece in self._pieces(messages, runner, run_manager):
            if isinstance(piece, AIMessageChunk):
                await _new_token(run_manager, piece)
            else:
                reply = piece
        assert reply is not None  # the last piece
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _pieces(
        self,
        messages: list[BaseMessage],
        runner: PaCoReRunner,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun,
    ) -> AsyncIterator[AIMessageChunk | AIMessage]:
        """A streamed call: the final round's token chunks as they arrive, a last chunk with the usage of every
        trajectory and the rounds (the whole answer there, when nothing streamed: a selector chose it, say), then
        the reply. All under the id LangChain gives a streamed run's message."""
        received: asyncio.Queue[Any] = asyncio.Queue()
        tokens = FinalRoundTokens(len(self._config.schedule) - 1, received.put_nowait)
        task = asyncio.ensure_future(self._run(messages, runner, run_manager, tokens))
        task.add_done_callback(lambda _: received.put_nowait(_DONE))
        message_id = f"{LC_ID_PREFIX}-{run_manager.run_id}"
        try:
            while (chunk := await received.get()) is not _DONE:
                chunk.id = message_id
                yield chunk
            result = await task
        finally:
            task.cancel()
        reply = reply_message(result)
        reply.id = message_id
        yield last_chunk(reply, whole=tokens.sent == 0)
        yield reply

    async def _astream_chat_model_events(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[MessagesData]:
        """LangChain's content-block streaming protocol (``stream_events(version="v3")``, its v2 streaming
        handlers): the streamed call's pieces as the protocol's events. LangChain hands this hook the run manager
        (it gives ``_astream`` none on its other roads), so this model has no ``_astream``; the chunks become events
        through LangChain's own bridge (see docs/architecture.md, "Other libraries' internals")."""
        assert run_manager is not None  # LangChain's protocol road always has one

        async def chunks() -> AsyncIterator[ChatGenerationChunk]:
            async for piece in self._pieces(messages, self._runner(stop, kwargs), run_manager):
                if isinstance(piece, AIMessageChunk):
                    await _new_token(run_manager, piece)  # as a model's _astream tells its run of each token
                    yield ChatGenerationChunk(message=piece)

        async for event in achunks_to_events(chunks(), message_id=f"{LC_ID_PREFIX}-{run_manager.run_id}"):
            yield event

    def _stream_chat_model_events(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[MessagesData]:
        yield from iterate_sync(self._astream_chat_model_events(messages, stop, run_manager, **kwargs))

    def _streams(
        self, kwargs: Mapping[str, Any], run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun
    ) -> bool:
        """Whether this call streams its tokens, as LangChain decides it for a chat model (``stream`` of the call,
        else ``streaming``, else whether a handler that streams tokens is attached), ``disable_streaming`` first."""
        stream = kwargs.get("stream")
        if self.disable_streaming is True or stream is False:
            return False
        if self.disable_streaming == "tool_calling" and kwargs.get("tools"):
            return False
        if stream or self.streaming:
            return True
        return any(hasattr(handler, "tap_output_aiter") for handler in run_manager.handlers)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return run_sync(self._agenerate(messages, stop, run_manager, **kwargs))


async def _new_token(
    run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun, chunk: AIMessageChunk
) -> None:
    """``chunk`` as one of the run's tokens, to its handlers (a sync call's run manager calls them directly)."""
    told = run_manager.on_llm_new_token(str(chunk.content), chunk=ChatGenerationChunk(message=chunk))
    if told is not None:
        await told


def runner_key(call: Mapping[str, Any]) -> Hashable | None:
    """A call's arguments as a hashable key: mappings and sequences by their contents (as JSON compares them),
    anything else by its type and its own hash (a class by identity). None when a value has no hash: that
    call gets a runner of its own, not kept."""
    try:
        key = _frozen(call)
        hash(key)
    except TypeError:
        return None
    return key


def _frozen(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return (Mapping, frozenset((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (Sequence, tuple(_frozen(item) for item in value))
    return (type(value), value)


def child_callbacks(
    run_manager: AsyncCallbackManagerForLLMRun | CallbackManagerForLLMRun | None,
) -> AsyncCallbackManager:
    """Callbacks for runs under this model's run: its inheritable handlers, tags and metadata (what a chain's
    ``run_manager.get_child()`` gives; a model's run manager has none, model runs being leaves usually). The
    handlers are the run's own instances, so a tracer from the environment sees the children under its run."""
    if run_manager is None:
        return AsyncCallbackManager(handlers=[])
    manager = AsyncCallbackManager(handlers=[], parent_run_id=run_manager.run_id)
    manager.set_handlers(run_manager.inheritable_handlers)
    manager.add_tags(run_manager.inheritable_tags)
    manager.add_metadata(run_manager.inheritable_metadata)
    return manager


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
