"""A lean LangChain chat model for OpenAI-compatible servers (vLLM, llama.cpp, ...).

Why not ChatOpenAI: at 1024 requests in flight it costs about 6 ms of client CPU per call and drops
vLLM's ``reasoning`` field. This model posts JSON over keep-alive connections pooled per event loop
(:mod:`~pacore_graph.models.http`, a lean HTTP/1.1 client), keeps the reasoning in
``additional_kwargs["reasoning_content"]`` and reports usage. One model talks to one server: several
replicas belong behind vllm-router, which each request's session key (:mod:`~pacore_graph.models.routing`)
lets keep a shared prompt on one replica.
It does not retry unless asked (``max_retries``): the PaCoRe explorer retries transient failures, once,
for every kind of model. LangChain's standard constructor arguments (``timeout``, ``stop``, ``max_retries``,
``temperature``, ...) are honoured, and an argument the class does not know is refused, never dropped.

Streaming has two meanings here. ``streaming=True`` (or the per-call ``sse=True``) asks the server for
server-sent events and assembles the message client-side: a transport, cheap at any scale. LangChain's
token streaming (``astream``, ``astream_events``, LangGraph's ``stream_mode="messages"``) goes through
``_astream`` and yields one chunk per delta to whoever listens.

Two roads (see ``ainvoke``): a whole message that no callback handler sees is its request and its message, without
the base class's per-call costs; every other call (a handler attached, token streaming, caches, rate limiters,
``output_version="v1"``) takes LangChain's own road, events and all.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from functools import partial
from typing import Any

import orjson
from langchain_core.callbacks import AsyncCallbackManager, AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.utils import LC_ID_PREFIX
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from pacore_graph.concurrency.per_loop import PerLoop
from pacore_graph.concurrency.retry import with_retries
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import RetryPolicy
from pacore_graph.errors import (
    RETRY_AFTER_STATUSES,
    ModelRequestError,
    PaCoReError,
    retry_after_seconds,
    status_is_retryable,
)
from pacore_graph.models.http import ConnectionPool
from pacore_graph.models.routing import SESSION_HEADER, fresh_key, prefix_key, session_key
from pacore_graph.models.sse import Delta, read_stream, reasoning_of
from pacore_graph.models.structured import StructuredOutputMixin
from pacore_graph.models.tool_choice import openai_tool_choice, strict_tools

CONVERTED_ROUNDS = 256  # message lists whose OpenAI form is kept: rounds of this many problems in flight
CONVERTED_CHARS = 64 * 2**20  # ... and their text at most: a few huge conversations must not stay in memory
ROUTER_HINT = (
    "one server URL per model: put the replicas behind vllm-router (`pacore serve-vllm --replicas N`, or "
    "`vllm-router --worker-urls URL ...`) and pass the router's URL"
)


def _normalise_base_url(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        url = url[: -len("/chat/completions")]
    return url


class OpenAICompatibleChatModel(StructuredOutputMixin, BaseChatModel):
    """Chat completions against one OpenAI-compatible server (or vllm-router), with vLLM's reasoning kept.

    ``base_url`` and ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, as the openai SDK's do.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    base_url: str = Field(
        default_factory=lambda: os.environ.get("OPENAI_BASE_URL"),  # None: refused by the validator below
        validate_default=True,
        description="the server's URL, ending in /v1 (default: OPENAI_BASE_URL)",
    )
    model: str = Field(description="model name the server knows")
    api_key: str | None = Field(
        default_factory=lambda: os.environ.get("OPENAI_API_KEY"), repr=False, description="default: OPENAI_API_KEY"
    )
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = Field(None, description="stop sequences sent with every request")
    request_timeout: float | None = Field(
        None, alias="timeout", description="seconds for a whole request; None: no limit"
    )
    max_retries: int = Field(0, ge=0, description="retries of a transient failure (PaCoRe runs retry on their own)")
    streaming: bool = Field(False, description="request SSE streaming and assemble the message client-side")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="extra request fields")

    _url: str = PrivateAttr()
    _pool: PerLoop[ConnectionPool] = PrivateAttr()
    _converted: dict[tuple[Any, ...], tuple[list[dict[str, Any]], str | None, int]] = PrivateAttr(default_factory=dict)
    _converted_chars: int = PrivateAttr(default=0)

    @field_validator("base_url", mode="before")
    @classmethod
    def _check_base_url(cls, url: Any) -> Any:
        if url is None:
            raise ValueError("no base_url given and OPENAI_BASE_URL is not set")
        if isinstance(url, (list, tuple)):
            raise PaCoReError(f"{len(url)} base URLs given; {ROUTER_HINT}")
        if isinstance(url, str) and not url.startswith(("http://", "https://")):
            raise ValueError(f"base URL {url!r} must start with http:// or https://")
        return _normalise_base_url(url) if isinstance(url, str) else url

    def model_post_init(self, context: Any) -> None:
        self._url = f"{self.base_url}/chat/completions"
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self._url
        self._pool = PerLoop(lambda: ConnectionPool(url, headers), ConnectionPool.aclose)

    @property
    def _llm_type(self) -> str:
        return "openai-compatible"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": self.base_url}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        model = kwargs.get("model") or self.model
        params = LangSmithParams(ls_provider="openai", ls_model_name=model, ls_model_type="chat")
        temperature = kwargs.get("temperature", self.temperature)
        if temperature is not None:
            params["ls_temperature"] = temperature
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    # ---- transport -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the running loop's connections now (else they are closed when the loop shuts down)."""
        await self._pool.drop()

    def payload(self, messages: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
        """The request body: only the fields that are set, as the PaCoRe reference pipeline sends."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        for name in ("temperature", "top_p", "max_tokens", "stop"):
            value = overrides.pop(name, getattr(self, name))
            if value is not None and value != []:
                body[name] = value
        body.update(self.extra_body)
        body.update({key: value for key, value in overrides.items() if value is not None})
        cap = (self.profile or {}).get("max_output_tokens")  # a default cap (the embedded model's), not a setting
        if cap and "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_tokens"] = cap
        return body

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        on_delta: Callable[[Delta], None] | None = None,
        key: str | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """Send one request; the assistant message as a dict with usage, finish_reason and model.

        ``stream`` (default: the ``streaming`` field) asks for server-sent events, assembled here;
        ``on_delta`` then sees each delta as it arrives. ``key`` is the request's session key (default:
        :func:`~pacore_graph.models.routing.session_key` of ``messages``), sent as the ``X-Session-ID`` header.
        """
        stream = overrides.pop("stream", self.streaming) or on_delta is not None
        body = self.payload(messages, **overrides)
        headers = {SESSION_HEADER: key or session_key(messages)}
        if stream:
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})
        attempt = partial(self._post_stream, body, headers, on_delta) if stream else partial(self._post, body, headers)
        if self.request_timeout is not None:
            attempt = partial(_within, self.request_timeout, attempt)
        if self.max_retries and on_delta is None:  # a streamed reply retried after deltas went out shows them twice
            return (await with_retries(attempt, RetryPolicy(max_attempts=self.max_retries + 1), None))[0]
        return await attempt()

    def _private(self) -> dict[str, Any]:
        """The private attributes in one slot read: pydantic looks each one up in about 2 us (``__getattr__``),
        and every request reads several."""
        return self.__pydantic_private__  # type: ignore[return-value]  # set by model_post_init

    def _endpoint(self) -> tuple[PerLoop[ConnectionPool], str]:
        """The connection pools (one per loop: ``pools.get()``, a dict lookup once the pool exists) and the URL
        every request goes to."""
        private = self._private()
        return private["_pool"], private["_url"]

    async def _post(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        pools, url = self._endpoint()
        pool = pools.get()
        status, raw, retry_after = await pool.post(orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), headers)
        if status != 200:
            raise _status_error(status, raw, url, retry_after)
        data: Any = None
        try:
            data = orjson.loads(raw)
            choice = data["choices"][0]
            message: dict[str, Any] = choice["message"]  # parsed JSON: a non-dict fails below
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            usage = data.get("usage") if isinstance(data, dict) else None  # spent, though the reply is unusable
            raise ModelRequestError(
                f"malformed response from {url}: {raw[:200]!r}", status=200, retryable=True, usage=usage
            ) from exc
        message["finish_reason"] = choice.get("finish_reason")
        message["usage"] = data.get("usage")
        message["model"] = data.get("model")
        return message

    async def _post_stream(
        self, body: dict[str, Any], headers: dict[str, str], on_delta: Callable[[Delta], None] | None
    ) -> dict[str, Any]:
        pools, url = self._endpoint()
        pool = pools.get()
        async with pool.stream(orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), headers) as response:
            if response.status != 200:
                raise _status_error(response.status, await response.read(), url, response.retry_after)
            return await read_stream(response.iter_chunks(), url, on_delta)

    def _openai_messages(self, messages: list[BaseMessage]) -> tuple[list[dict[str, Any]], str | None]:
        """The messages in OpenAI form and their prefix key (None: short, each request its own key), made once
        per conversation: the K trajectories of a round send the same messages. Keyed by what the messages
        say, not by the objects: a message edited in place is converted again."""
        key = tuple(map(_message_key, messages))
        private = self._private()
        cache: dict[tuple[Any, ...], tuple[list[dict[str, Any]], str | None, int]] = private["_converted"]
        cached = cache.get(key)
        if cached is not None:
            return cached[0], cached[1]
        converted = convert_to_openai_messages(messages)
        session = prefix_key(converted)
        chars = _chars(converted)
        if chars > CONVERTED_CHARS:
            return converted, session
        while cache and (len(cache) >= CONVERTED_ROUNDS or private["_converted_chars"] + chars > CONVERTED_CHARS):
            private["_converted_chars"] -= cache.pop(next(iter(cache)))[2]
        cache[key] = (converted, session, chars)
        private["_converted_chars"] += chars
        return converted, session

    # ---- LangChain interface ---------------------------------------------------------------------

    async def ainvoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """``BaseChatModel.ainvoke``, with a shorter road for a call no callback handler sees.

        Two roads. LangChain's own (``agenerate``: its events, caches, rate limiters, token streaming) takes every
        call that a handler sees, that streams tokens (``stream=True``) or that a cache, a rate limiter or
        ``output_version="v1"`` concerns. A whole message that no handler sees is only its request and its message:
        the callbacks are configured as ``BaseChatModel`` configures them (the caller's, this model's, tracing from
        the environment or context), and when that finds no handler the base class's per-call costs (an asyncio
        task, tracing copies of the messages, a signature inspection: about 0.1 ms of CPU, close to a tenth of the
        client's cost per trajectory at 1024 requests in flight) would serve nobody. The message is named by the
        config's run id, or a counter-made one (no handler will look it up).
        """
        if not kwargs.get("stream") and self._plain_calls():
            # Callbacks given (as PaCoRe's explorer gives them) make the ambient config irrelevant to the run.
            seen = config if config and "callbacks" in config else ensure_config(config)
            manager = AsyncCallbackManager.configure(
                seen.get("callbacks"), self.callbacks, self.verbose, seen.get("tags"), self.tags
            )
            if not manager.handlers:
                kwargs.pop("ls_structured_output_format", None)  # tracing only, never a request field
                run_id = seen.get("run_id") or _unseen_run_id()
                return await self._amessage(_as_messages(input), stop, id=f"{LC_ID_PREFIX}-{run_id}-0", **kwargs)
        return await super().ainvoke(input, config, stop=stop, **kwargs)

    async def apreconnect(self, connections: int) -> None:
        """Have ``connections`` connections to the server open or opening on this loop, opened in the
        background (see ConnectionPool.preconnect); for a caller about to send a burst of requests."""
        pools, _ = self._endpoint()
        pool = pools.get()
        pool.preconnect(connections)

    def _plain_calls(self) -> bool:
        """Whether a call is one request and its message: no cache, rate limiter or other output version."""
        llm_cache = self.cache if self.cache is not None else get_llm_cache()
        return not llm_cache and self.rate_limiter is None and self.output_version != "v1"

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """One whole message. ``sse`` (default: ``streaming``) only picks the transport; LangChain's own
        ``stream`` flag, which routes token streaming to :meth:`_astream`, is not a request field."""
        return ChatResult(generations=[ChatGeneration(message=await self._amessage(messages, stop, **kwargs))])

    async def _amessage(
        self, messages: list[BaseMessage], stop: list[str] | None, *, id: str | None = None, **kwargs: Any
    ) -> AIMessage:
        kwargs.pop("stream", None)
        if stop:
            kwargs["stop"] = stop
        converted, key = self._openai_messages(messages)
        sse = kwargs.pop("sse", self.streaming)
        raw = await self.acomplete(converted, key=key or fresh_key(), stream=sse, **kwargs)
        return to_ai_message(raw, id)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return run_sync(self._agenerate(messages, stop=stop, **kwargs))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """True token streaming (``astream``, ``astream_events``, ``stream_mode="messages"``): a chunk per
        delta as the server sends it (LangChain passes each to the callbacks), then usage and finish."""
        kwargs.pop("stream", None)
        kwargs.pop("sse", None)
        if stop:
            kwargs["stop"] = stop
        queue: asyncio.Queue[Delta | None] = asyncio.Queue()

        converted, key = self._openai_messages(messages)

        async def pump() -> dict[str, Any]:
            try:
                return await self.acomplete(converted, key=key or fresh_key(), on_delta=queue.put_nowait, **kwargs)
            finally:
                queue.put_nowait(None)

        task = asyncio.ensure_future(pump())
        named: dict[int, str] = {}  # tool calls whose name and id went out already (llama.cpp repeats them)
        try:
            while (delta := await queue.get()) is not None:
                yield _delta_chunk(delta, named)
            final = await task
        finally:
            task.cancel()
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=_usage_metadata(final.get("usage")),
                response_metadata={"finish_reason": final.get("finish_reason"), "model_name": final.get("model")},
                chunk_position="last",
            )
        )

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        # Sync streaming gets the whole message as one chunk; async callers get true streaming.
        result = self._generate(*args, **kwargs)
        message = result.generations[0].message
        yield ChatGenerationChunk(message=AIMessageChunk(**message.model_dump(exclude={"type"})))

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """OpenAI tool calling, as vLLM serves it (``--enable-auto-tool-choice``). ``tool_choice``: LangChain's
        values ("any" or True: some tool; a tool's name: that tool) become OpenAI's; a name not among
        ``tools`` is refused here (vLLM would answer 400). Tools are sent strict (arguments held to their schemas,
        so vLLM returns them as objects) unless ``strict=False`` or the tool itself says otherwise; tools already
        in OpenAI form get ``strict`` too (see :func:`~pacore_graph.models.tool_choice.strict_tools`)."""
        formatted = strict_tools([convert_to_openai_tool(tool, strict=strict) for tool in tools], strict)
        choice = openai_tool_choice(tool_choice, formatted)
        if choice is not None:
            kwargs["tool_choice"] = choice
        return super().bind(tools=formatted, **kwargs)


def _as_messages(input: LanguageModelInput) -> list[BaseMessage]:
    if isinstance(input, list) and all(isinstance(message, BaseMessage) for message in input):
        return input
    if isinstance(input, PromptValue):
        return input.to_messages()
    if isinstance(input, str):
        return [HumanMessage(input)]
    return convert_to_messages(input)


def _chars(value: Any, depth: int = 5) -> int:
    """About how much text a converted message list holds: the lengths of its strings (content parts,
    image URLs and tool-call arguments included), a few levels deep."""
    if isinstance(value, str):
        return len(value)
    if depth == 0:
        return 0
    if isinstance(value, dict):
        return sum(_chars(item, depth - 1) for item in value.values())
    if isinstance(value, list):
        return sum(_chars(item, depth - 1) for item in value)
    return 0


def _status_error(status: int, raw: bytes, url: str, retry_after: str | None = None) -> ModelRequestError:
    text = raw[:500].decode("utf-8", "replace")
    hint = ""
    wait = retry_after_seconds(retry_after) if status in RETRY_AFTER_STATUSES else None
    if status == 404:
        hint = " (wrong model name or base URL? the base URL should end in /v1)"
    elif status == 400 and ("context" in text.lower() or "too long" in text.lower() or "reduce" in text.lower()):
        hint = " (the prompt does not fit the model's context)"
    elif wait is not None:
        hint = f" (Retry-After: {wait:g} s)"
    return ModelRequestError(
        f"HTTP {status} from {url}{hint}: {text}",
        status=status,
        retryable=status_is_retryable(status),
        retry_after=wait,
    )


# the process id, a random base (a UUID's first 24 characters) and a counter (its last 12 hex digits)
_run_id_source: tuple[int, str, Iterator[int]] = (0, "", itertools.count())


def _unseen_run_id() -> str:
    """A run id, UUID-shaped and unique to this process, for a call no handler sees: it only names the call's
    message. About 0.2 us, where ``uuid7()`` and its formatting cost about 2 us (close to 1% of the client's
    CPU per trajectory at [32, 4]). A forked process (a server's workers) makes a base of its own: a chat
    thread served by several workers must not get two answers with one id (``add_messages`` keeps the last)."""
    global _run_id_source
    pid, base, numbers = _run_id_source
    if pid != os.getpid():
        pid, base, numbers = _run_id_source = (os.getpid(), str(uuid.uuid4())[:24], itertools.count())
    return f"{base}{next(numbers):012x}"


def _usage_metadata(usage: dict[str, Any] | None) -> UsageMetadata | None:
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return UsageMetadata(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)


def to_ai_message(raw: dict[str, Any], id: str | None = None) -> AIMessage:
    """An assistant message dict from the server as an AIMessage, reasoning and usage kept."""
    fields: dict[str, Any] = {
        "content": raw.get("content") or "",
        "usage_metadata": _usage_metadata(raw.get("usage")),
        "response_metadata": {"finish_reason": raw.get("finish_reason"), "model_name": raw.get("model")},
        "id": id,
    }  # only what is set: every field given costs validation time (a plain reply is the hot path)
    if reasoning := reasoning_of(raw):
        fields["additional_kwargs"] = {"reasoning_content": reasoning}
    if raw.get("tool_calls"):
        fields["tool_calls"], fields["invalid_tool_calls"] = _tool_calls(raw["tool_calls"])
    return AIMessage(**fields)


def _tool_calls(calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """OpenAI tool calls as LangChain's parsed and invalid ones (arguments that are not a JSON object)."""
    tool_calls, invalid = [], []
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
            if not isinstance(args, dict):
                raise ValueError("arguments are not an object")
            tool_calls.append({"name": function.get("name", ""), "args": args, "id": call.get("id")})
        except ValueError as exc:
            invalid.append({"name": function.get("name"), "args": arguments, "id": call.get("id"), "error": str(exc)})
    return tool_calls, invalid


async def _within(seconds: float, send: Callable[[], Any]) -> Any:
    """One attempt of a request, cut after ``seconds`` (the ``timeout`` constructor argument)."""
    async with asyncio.timeout(seconds):
        return await send()


def _message_key(message: BaseMessage) -> tuple[Any, ...]:
    """What a message says, for the conversion cache: kind (and a ChatMessage's role), content, name, tool calls
    and their answers (the OpenAI form holds nothing else of it). Fields are read from the instance's dict:
    ``getattr`` with a default on a pydantic model that lacks the field raises inside, at microseconds a call."""
    fields = vars(message)
    content = fields["content"]
    if not isinstance(content, str):
        content = repr(content)
    calls = fields.get("tool_calls")
    kind = fields["type"], fields.get("role")
    return kind, content, fields.get("name"), repr(calls) if calls else None, fields.get("tool_call_id")


def _delta_chunk(delta: dict[str, Any], named: dict[int, str] | None = None) -> ChatGenerationChunk:
    """One streamed delta as a LangChain chunk. A tool call's name and id go out once per index: LangChain
    concatenates the chunks' strings, and llama.cpp repeats both in every delta of a call."""
    additional = {}
    if text := reasoning_of(delta):
        additional["reasoning_content"] = text
    chunks = []
    for call in delta.get("tool_calls") or ():
        function = call.get("function") or {}
        index, name, call_id = call.get("index"), function.get("name"), call.get("id")
        if named is not None and index is not None:
            if index in named:
                name = None if name == named[index] else name
                call_id = None
            elif name:
                named[index] = name
        chunks.append(tool_call_chunk(name=name, args=function.get("arguments"), id=call_id, index=index))
    return ChatGenerationChunk(
        message=AIMessageChunk(
            content=delta.get("content") or "", additional_kwargs=additional, tool_call_chunks=chunks
        )
    )
