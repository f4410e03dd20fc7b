"""One chat-completions request, checked and turned into the PaCoRe call it asks for, before anything is spent.

What the fields mean here:

- ``temperature``, ``top_p``, ``max_tokens`` / ``max_completion_tokens``: applied to every trajectory.
  PaCoRe needs diverse trajectories: leave temperature unset (1.0, as the paper) rather than 0.
- ``seed``: seeds the shuffle of the references (PaCoReConfig.seed), and is not sent upstream: the same
  sampling seed on K trajectories would make them identical.
- ``tools``, ``tool_choice``, ``parallel_tool_calls``: every trajectory is offered the tools; the reply
  carries the final trajectory's tool calls. Each tool's ``parameters`` must be a JSON schema of an object;
  a named ``tool_choice`` must name an offered tool, and ``"required"`` needs tools.
- ``stream``, ``stream_options.include_usage``: answered as OpenAI streams (see :mod:`.streaming`).
- ``pacore``: the schedule (see :mod:`.schedule`).
- ``n`` other than 1, ``logprobs``, legacy ``functions``: refused (one synthesised answer has no
  alternatives or token log-probabilities).
- ``user``, ``metadata``, ``store`` and other account-side fields: ignored.
- Any other field (``stop``, penalties, ``response_format``, vLLM's ``chat_template_kwargs``, ...) is
  sent upstream with every trajectory, as vLLM's extra body fields are.

Everything is checked before the first upstream call, strictly (``"2"`` is not a number, ``true`` not 1):
the body's JSON (:func:`pacore_graph.inputs.parse_json`), every message's fields and types
(:func:`pacore_graph.inputs.check_messages`), the tools, and that the last user message has text for the
synthesis prompt to quote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import BaseMessage, convert_to_messages
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pacore_graph.config import PaCoReConfig
from pacore_graph.inputs import InputError, check_messages, check_problem_text, json_type, one_line
from pacore_graph.server.errors import RequestError
from pacore_graph.server.schedule import ScheduleField, split_model_name
from pacore_graph.server.tools import check_tool_choice, check_tools
from pacore_graph.synthesis.prompt import last_user_index

MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")  # what reaches the upstream
IGNORED_FIELDS = frozenset(
    {"user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key", "prompt_cache_retention"}
)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    include_usage: bool = False


class ForwardedFields(BaseModel):
    """Fields sent upstream as they are, typed as OpenAI and vLLM document them: a wrong one is refused here
    once, not by the upstream once per trajectory. Others pass unchecked."""

    model_config = ConfigDict(extra="allow", strict=True)

    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    top_k: int | None = None
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0)
    chat_template_kwargs: dict[str, Any] | None = None


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions`` as far as PaCoRe reads it; other fields are kept as extras.
    Strict: a string is not a number, a number not a boolean (OpenAI refuses them too)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(min_length=1)
    messages: list[Any]
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[Any] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    pacore: ScheduleField | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n not in (None, 1):
            raise ValueError("PaCoRe synthesises one answer: n must be 1")
        return n


@dataclass(frozen=True)
class PlannedCall:
    """What one request runs: the conversation, the schedule and sampling, and what goes upstream with it."""

    label: str  # the model name as the client wrote it; echoed in the reply
    upstream_model: str
    messages: list[BaseMessage]
    config: PaCoReConfig
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    request_fields: dict[str, Any] = field(default_factory=dict)  # sent with every trajectory
    stream: bool = False
    include_usage: bool = False

    def runner_key(self) -> str:
        """Requests with equal keys can share one compiled PaCoRe graph (agents send the same tools each step)."""
        return json.dumps(
            [
                self.upstream_model,
                self.config.model_dump(mode="json"),
                self.tools,
                self.tool_choice,
                self.request_fields,
            ],
            sort_keys=True,
            default=str,
        )


def plan_call(body: Any, defaults: PaCoReConfig, default_model: str) -> PlannedCall:
    """Check a request body; a :class:`RequestError` (400) names the first thing wrong with it."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid(exc, body) from None
    refuse_unsupported(request)
    forwarded = {key: value for key, value in (request.model_extra or {}).items() if key not in IGNORED_FIELDS}
    try:
        ForwardedFields.model_validate(forwarded)
    except ValidationError as exc:
        raise invalid(exc, forwarded) from None
    try:
        check_messages(request.messages)
        check_tools(request.tools)
        check_tool_choice(request.tool_choice, request.tools)
    except InputError as exc:
        raise RequestError(400, str(exc), param=exc.param) from None
    upstream_model, rounds = split_model_name(request.model)
    if request.pacore is not None and (chosen := request.pacore.schedule()) is not None:
        rounds = chosen
    settings: dict[str, Any] = {}
    if rounds is not None:
        settings["rounds"] = rounds
    for name, value in (
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("seed", request.seed),
        ("max_tokens", request.max_completion_tokens or request.max_tokens),
    ):
        if value is not None:
            settings[name] = value
    try:
        config = PaCoReConfig(**{**defaults.model_dump(), **settings}) if settings else defaults
    except ValidationError as exc:
        raise invalid(exc, settings) from None
    messages = to_langchain(request.messages)
    if config.rounds:
        try:
            check_problem_text(messages, last_user_index(messages))
        except InputError as exc:
            raise RequestError(400, str(exc), param=exc.param) from None
        except ValueError as exc:
            raise RequestError(400, f"{exc} (PaCoRe rewrites the last user message)", param="messages") from None
    if request.parallel_tool_calls is not None and request.tools:
        forwarded["parallel_tool_calls"] = request.parallel_tool_calls
    return PlannedCall(
        label=request.model,
        upstream_model=upstream_model or default_model,
        messages=messages,
        config=config,
        tools=request.tools,
        tool_choice=request.tool_choice if request.tools else None,
        request_fields=forwarded,
        stream=request.stream,
        include_usage=bool(request.stream and request.stream_options and request.stream_options.include_usage),
    )


def invalid(exc: ValidationError, data: Any) -> RequestError:
    """The first validation error, in one line, naming the field as OpenAI does (``pacore.rounds[0]``): the
    parts of pydantic's location that lead through ``data`` (a union's member names do not)."""
    first = exc.errors()[0]
    where, node = "", data
    for part in first["loc"]:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            where, node = f"{where}.{part}", node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            where, node = f"{where}[{part}]", node[part]
        elif isinstance(node, (dict, list)) and not where:  # a missing top-level field
            where = f".{part}"
    where = where.lstrip(".")
    given = f", not {json_type(first['input'])}" if first["type"].endswith("_type") else ""
    return RequestError(400, f"invalid {where or 'request'}: {one_line(first['msg'])}{given}", param=where or None)


def refuse_unsupported(request: ChatCompletionRequest) -> None:
    if request.logprobs or request.top_logprobs:
        raise RequestError(
            400, "logprobs are not available: the answer is synthesised over many trajectories", param="logprobs"
        )
    if request.functions is not None or request.function_call is not None:
        raise RequestError(
            400, "the legacy functions / function_call fields are not supported: use tools", param="functions"
        )


def to_langchain(messages: list[dict[str, Any]]) -> list[BaseMessage]:
    """OpenAI message dicts (checked by :func:`~pacore_graph.inputs.check_messages`) as LangChain messages;
    fields other than role, content, name, tool_calls and tool_call_id (a client's own bookkeeping, a previous
    reply's reasoning) are not sent upstream."""
    converted = []
    for position, message in enumerate(messages):
        kept = {key: message[key] for key in MESSAGE_FIELDS if message.get(key) is not None}
        kept.setdefault("content", "")
        try:
            converted.extend(convert_to_messages([kept]))
        except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
            raise RequestError(
                400,
                f"messages[{position}] is not a valid {message['role']} message: {one_line(str(exc))}",
                param=f"messages[{position}]",
            ) from None
    return converted
