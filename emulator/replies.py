"""What the emulator says: a deterministic reply for each request, and its bytes on the wire.

A reply is a function of (emulator seed, the request's messages, how many times that exact request was
seen before). Identical requests (PaCoRe's K parallel trajectories) therefore get different replies, the
set of replies is repeatable, and a retry is a fresh draw (a fault does not repeat forever).

Every reply ends with a conclusion holding ``\\boxed{N}``: N is drawn from the problem's own answer
distribution (:class:`~pacore_emulator.config.AnswerMix`: easy, split or hard), and a
synthesis prompt (the Table-6 template) answers with the majority of its references, so a benchmark on
the emulator sees PaCoRe-like behaviour (synthesis beats a single sample).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pacore_emulator.config import EmulatorConfig

ANSWER_RANGE = 1000
VOCAB = (
    "let consider the sum over all cases so we get that each term is bounded and hence since "
    "therefore check again which gives a factor of two then substitute back into equation wait "
    "maybe simpler approach count pairs modulo prime verify small values"
).split()
CLOSING = [" Checked.", " Verified."]  # filler before the final sentence when answer_tokens is large
_ORIGINAL = re.compile(r"Original Problem:\n(.*?)\n\nReference Responses:", re.S)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_REFERENCE_SPLIT = re.compile(r"\nReference \d+:\n")
# The note a deduplicated reference carries (pacore_graph.coordination.references.DUPLICATES_NOTE; a test
# keeps the two in step): it stands for that many references.
_DUPLICATES = re.compile(r"\n\n\[(\d+) references gave this same response\.\]\s*$")


def message_text(content: Any) -> str:
    """Text of a message content, which OpenAI allows to be a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """About four characters per token plus a few per message, as chat templates add."""
    return sum(len(message_text(m.get("content"))) // 4 + 4 for m in messages) + 2


def _digest(*parts: Any) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(str(part).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.digest()


def _unit(digest: bytes) -> float:
    return int.from_bytes(digest[:7], "big") / float(1 << 56)


def request_key(messages: list[dict[str, Any]]) -> str:
    """Identity of a request's prompt, for counting repeats."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def problem_answers(seed: int, problem: str, count: int) -> list[int]:
    """The problem's first ``count`` answers: distinct, fixed by the seed and the problem's text."""
    answers = [int.from_bytes(_digest("answer", seed, problem)[:4], "big") % ANSWER_RANGE]
    salt = 0
    while len(answers) < count:
        salt += 1
        answer = int.from_bytes(_digest("answer", seed, problem, salt)[:4], "big") % ANSWER_RANGE
        if answer not in answers:
            answers.append(answer)
    return answers


def problem_kind(config: EmulatorConfig, problem: str) -> str:
    """Easy, split, hard, ...: the problem's kind in ``config.answers``, fixed by the seed and the text."""
    return config.answers.pick(_unit(_digest("kind", config.seed, problem)))


def majority_answer(config: EmulatorConfig, problem: str) -> int:
    """The answer most trajectories of ``problem`` (the text of its user message) reach."""
    return problem_answers(config.seed, problem, 1)[0]


def draw_answer(config: EmulatorConfig, problem: str, rng: random.Random) -> int:
    """One trajectory's answer: the problem's k-th answer with the k-th share of its kind, else noise."""
    shares = config.answers.kinds[problem_kind(config, problem)]
    u = rng.random()
    edge = 0.0
    for answer, share in zip(problem_answers(config.seed, problem, len(shares)), shares, strict=True):
        edge += share
        if u < edge:
            return answer
    return rng.randrange(ANSWER_RANGE)


def synthesis_answer(text: str) -> int | None:
    """Majority of the ``\\boxed{}`` answers in a synthesis prompt's references (ties: smallest); a
    deduplicated reference counts as many times as its note says."""
    match = _ORIGINAL.search(text)
    if not match:
        return None
    votes: Counter[int] = Counter()
    for reference in _REFERENCE_SPLIT.split(text[match.end() :])[1:]:
        found = _BOXED.findall(reference)
        if found and found[-1].strip().lstrip("-").isdigit():
            duplicates = _DUPLICATES.search(reference)
            votes[int(found[-1])] += int(duplicates.group(1)) if duplicates else 1
    if not votes:
        return None
    best = max(votes.values())
    return min(answer for answer, count in votes.items() if count == best)


@dataclass
class ReplyPlan:
    """One request's fate: its fault (if any), its tokens in order, and how it finished."""

    fault: str | None
    pieces: list[tuple[str, str]]  # (channel, text); channel is "reasoning" or "content"
    prompt_tokens: int
    finish_reason: str
    answer: int
    cut_fraction: float
    created: int = field(default_factory=lambda: int(time.time()))
    request_id: str = ""
    cached_tokens: int | None = None  # prompt tokens found in the prefix cache; None: the emulator keeps none
    tool_call: tuple[str, str, str] | None = None  # (id, name, arguments) of a forced tool call
    more: tuple[ReplyPlan, ...] = ()  # the other choices of a request with n > 1

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces)

    @property
    def all_completion_tokens(self) -> int:
        """Tokens of every choice (usage counts them all)."""
        return len(self.pieces) + sum(len(other.pieces) for other in self.more)

    @property
    def steps(self) -> int:
        """Decode steps: the longest choice's tokens (the choices decode side by side)."""
        return max(len(self.pieces), *(len(other.pieces) for other in self.more)) if self.more else len(self.pieces)

    def truncate(self, limit: int) -> None:
        """Cut every choice to ``limit`` tokens (vLLM's max_tokens), finishing on "length"."""
        for plan in (self, *self.more):
            if len(plan.pieces) > limit:
                plan.pieces = plan.pieces[:limit]
                plan.finish_reason = "length"


def plan_reply(config: EmulatorConfig, body: dict[str, Any], occurrence: int) -> ReplyPlan:
    """Decide everything about one request's reply up front (cheap; no I/O). With ``n`` > 1 the other choices
    are the replies to occurrences ``occurrence + 1`` on, as if the same request came n times."""
    plan = _plan_one(config, body, occurrence)
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        plan.more = tuple(_plan_one(config, body, occurrence + i) for i in range(1, n))
        for other in plan.more:
            other.request_id, other.created = plan.request_id, plan.created
    return plan


def _plan_one(config: EmulatorConfig, body: dict[str, Any], occurrence: int) -> ReplyPlan:
    messages = body.get("messages") or []
    key = request_key(messages)
    salt = (config.seed, config.replica) if config.replica else (config.seed,)  # replica 0: replies as ever
    digest = _digest(*salt, key, occurrence)
    rng = random.Random(digest)
    fault = config.faults.pick(_unit(_digest("fault", digest)))

    last_user = next((message_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    original = _ORIGINAL.search(last_user)
    problem = original.group(1) if original else last_user
    answer = synthesis_answer(last_user)
    if answer is None:
        answer = draw_answer(config, problem, rng)

    length = rng.randint(*config.output_tokens) if isinstance(config.output_tokens, tuple) else config.output_tokens
    if config.answers.minority_length != 1.0 and answer != majority_answer(config, problem):
        length = round(length * config.answers.minority_length)
    conclusion = rng.randint(*config.answer_tokens) if isinstance(config.answer_tokens, tuple) else config.answer_tokens
    pieces = _pieces(config.reasoning, rng, length, conclusion, answer)
    tool_call = None
    if body.get("tools") and body.get("tool_choice") not in (None, "auto", "none"):
        thought = [piece for piece in pieces if piece[0] == "reasoning"] if config.tool_call_reasoning else []
        tool_call, pieces = _forced_tool_call(body, digest)
        pieces = thought + pieces
    elif body.get("response_format"):
        pieces = _structured_pieces(body["response_format"]) or pieces
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    # vLLM ends a forced call to a named tool on "stop", a "required" one on "tool_calls"
    finish = "tool_calls" if tool_call is not None and body.get("tool_choice") == "required" else "stop"
    if isinstance(limit, int) and 0 < limit < len(pieces):
        pieces = pieces[:limit]
        finish = "length"
    return ReplyPlan(
        fault=fault,
        pieces=pieces,
        prompt_tokens=estimate_prompt_tokens(messages),
        finish_reason=finish,
        answer=answer,
        cut_fraction=rng.uniform(0.1, 0.9),
        request_id="chatcmpl-" + digest[:12].hex(),
        tool_call=tool_call,
    )


def _chunks(text: str, size: int = 4) -> list[str]:
    """A text in pieces of about one token each (four characters)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def schema_instance(schema: Any) -> Any:
    """A small value that fits a JSON schema (required properties only), as guided decoding would give."""
    if not isinstance(schema, dict):
        return {}
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return schema_instance(schema[key][0])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_instance(properties.get(name, {})) for name in schema.get("required") or []}
    return {"array": [], "integer": 0, "number": 0, "boolean": False, "null": None}.get(kind, "x")


def _forced_tool_call(body: dict[str, Any], digest: bytes) -> tuple[tuple[str, str, str], list[tuple[str, str]]]:
    """The call a "required" or named ``tool_choice`` forces (``check_request`` vetted the name), as vLLM's guided
    decoding makes it: the named tool, or the first; arguments fitting its parameter schema."""
    choice = body["tool_choice"]
    tools = [tool.get("function") or {} for tool in body["tools"]]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        function = next((tool for tool in tools if tool.get("name") == name), tools[0])
    else:
        function = tools[0]
    arguments = json.dumps(schema_instance(function.get("parameters") or {}))
    call = ("chatcmpl-tool-" + digest[12:20].hex(), function.get("name", ""), arguments)
    return call, [("tool", call[1])] + [("arguments", piece) for piece in _chunks(arguments)]


def _structured_pieces(response_format: Any) -> list[tuple[str, str]] | None:
    """JSON content for a ``json_object`` or ``json_schema`` response format (None: another format)."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
        return [("content", piece) for piece in _chunks(json.dumps(schema_instance(schema)))]
    if kind == "json_object":
        return [("content", "{}")]
    return None


def _pieces(style: str, rng: random.Random, length: int, conclusion_tokens: int, answer: int) -> list[tuple[str, str]]:
    conclusion_words = [" The", " answer", " is", f" \\boxed{{{answer}}}."]
    n_answer = min(length, max(conclusion_tokens, len(conclusion_words)))
    fillers = n_answer - len(conclusion_words)
    conclusion = [CLOSING[i % len(CLOSING)] for i in range(max(fillers, 0))] + conclusion_words
    conclusion = conclusion[len(conclusion) - n_answer :]
    conclusion[0] = conclusion[0].lstrip()
    if style == "think":
        n_reason = max(length - n_answer - 2, 0)
        words = [" " + w for w in rng.choices(VOCAB, k=n_reason)]
        head = [("content", "<think>\n")] + [("content", w) for w in words] + [("content", "\n</think>\n\n")]
        pieces = head + [("content", w) for w in conclusion]
        return pieces[:length] if length >= len(conclusion) + 2 else [("content", w) for w in conclusion]
    n_reason = length - n_answer
    words = [" " + w for w in rng.choices(VOCAB, k=n_reason)]
    channel = "content" if style == "none" else "reasoning"
    if style == "none" and words:
        conclusion[0] = "\n\n" + conclusion[0]
    return [(channel, w) for w in words] + [("content", w) for w in conclusion]


# ----------------------------------------------------------------------------------------- wire format


def _reasoning_fields(style: str, text: str | None) -> dict[str, str | None]:
    if style == "reasoning":
        return {"reasoning": text}
    if style == "reasoning_content":
        return {"reasoning_content": text}
    if style == "both":
        return {"reasoning": text, "reasoning_content": text}
    return {}


def usage_dict(plan: ReplyPlan) -> dict[str, Any]:
    completion = plan.all_completion_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.prompt_tokens + completion,
    }
    if plan.cached_tokens is not None:  # as vLLM reports prefix-cache hits
        usage["prompt_tokens_details"] = {"cached_tokens": plan.cached_tokens}
    return usage


def _message(config: EmulatorConfig, plan: ReplyPlan) -> dict[str, Any]:
    if plan.tool_call is not None:  # vLLM: empty content beside the call
        call_id, name, arguments = plan.tool_call
        arguments = "".join(text for channel, text in plan.pieces if channel == "arguments")
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        thought = "".join(text for channel, text in plan.pieces if channel == "reasoning") or None
        reasoning_fields = _reasoning_fields(config.reasoning, thought)
        return {"role": "assistant", "content": "", "tool_calls": [call], **reasoning_fields}
    content = "".join(text for channel, text in plan.pieces if channel == "content")
    reasoning = "".join(text for channel, text in plan.pieces if channel == "reasoning")
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    message.update(_reasoning_fields(config.reasoning, reasoning or None))
    return message


def completion_body(config: EmulatorConfig, plan: ReplyPlan) -> bytes:
    """The JSON body of a non-streamed chat completion, shaped like vLLM's (its always-null extras left out)."""
    choices = [
        {"index": i, "message": _message(config, p), "logprobs": None, "finish_reason": p.finish_reason}
        for i, p in enumerate((plan, *plan.more))
    ]
    body: dict[str, Any] = {
        "id": plan.request_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": config.model,
        "choices": choices,
    }
    if config.usage:
        body["usage"] = usage_dict(plan)
    return json.dumps(body, ensure_ascii=False).encode()


@lru_cache(maxsize=8192)
def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _deltas(config: EmulatorConfig, plan: ReplyPlan) -> list[str]:
    """Each token's delta object, as JSON text."""
    reasoning_keys = list(_reasoning_fields(config.reasoning, "").keys())
    deltas = []
    for channel, text in plan.pieces:
        encoded = _json_string(text)
        if channel == "content":
            deltas.append('{"content":' + encoded + "}")
        elif channel == "tool" and plan.tool_call is not None:  # vLLM: the call's id and name first, then arguments
            deltas.append(
                '{"content":null,"tool_calls":[{"id":"'
                + plan.tool_call[0]
                + '","type":"function","index":0,"function":{"name":'
                + encoded
                + "}}]}"
            )
        elif channel == "arguments":
            deltas.append('{"content":null,"tool_calls":[{"index":0,"function":{"arguments":' + encoded + "}}]}")
        else:
            deltas.append("{" + ",".join(f'"{k}":{encoded}' for k in reasoning_keys) + "}")
    return deltas


def stream_events(config: EmulatorConfig, plan: ReplyPlan, include_usage: bool) -> tuple[bytes, list[int], bytes]:
    """SSE bytes of a streamed reply: (token events, offset after each event, tail).

    Event 0 is the role chunk, event i the i-th token (of every choice, with n > 1); the tail holds the finish
    chunks, the usage chunk when asked and ``data: [DONE]``. Offsets let the server write whatever is due as one
    slice.
    """
    envelope = (
        '{"id":"'
        + plan.request_id
        + '","object":"chat.completion.chunk","created":'
        + str(plan.created)
        + ',"model":'
        + json.dumps(config.model)
    )
    tail_open = ',"logprobs":null,"finish_reason":null}]}'
    plans = (plan, *plan.more)
    heads = [envelope + ',"choices":[{"index":' + str(i) + ',"delta":' for i in range(len(plans))]
    parts = ["".join("data: " + head + '{"role":"assistant","content":""}' + tail_open + "\n\n" for head in heads)]
    if not plan.more:
        head = heads[0]
        parts += ["data: " + head + delta + tail_open + "\n\n" for delta in _deltas(config, plan)]
    else:
        columns = [_deltas(config, p) for p in plans]
        for step in range(plan.steps):
            parts.append(
                "".join(
                    "data: " + heads[i] + deltas[step] + tail_open + "\n\n"
                    for i, deltas in enumerate(columns)
                    if step < len(deltas)
                )
            )
    encoded_parts = [p.encode() for p in parts]
    offsets = []
    total = 0
    for p in encoded_parts:
        total += len(p)
        offsets.append(total)
    tail = "".join(
        "data: " + head + '{},"logprobs":null,"finish_reason":' + json.dumps(p.finish_reason) + "}]}\n\n"
        for head, p in zip(heads, plans, strict=True)
    )
    if include_usage and config.usage:
        usage = json.dumps(usage_dict(plan))
        tail += "data: " + envelope + ',"choices":[],"usage":' + usage + "}\n\n"
    tail += "data: [DONE]\n\n"
    return b"".join(encoded_parts), offsets, tail.encode()


def error_body(status: int, message: str, kind: str, param: str | None = None) -> bytes:
    """vLLM's error body: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status as code."""
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": status}}).encode()


def invalid_body(raw: bytes) -> tuple[dict[str, Any] | None, bytes | None]:
    """The parsed request body, or the 400 body vLLM's request validation gives (type "Bad Request", ``param`` the
    place it failed)."""
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError as exc:
        position = getattr(exc, "pos", 0)
        return None, error_body(400, f"JSON decode error: {exc}", "Bad Request", f"body.{position}")
    if body is None:
        return None, error_body(400, "body: Field required", "Bad Request", "body")
    if not isinstance(body, dict):
        return None, error_body(400, "body: Input should be a valid dictionary", "Bad Request", "body")
    messages = body.get("messages")
    if not isinstance(messages, list):
        what = "Field required" if messages is None else "Input should be a valid list"
        return None, error_body(400, f"body.messages: {what}", "Bad Request", "body.messages")
    return body, None


def check_request(config: EmulatorConfig, body: dict[str, Any]) -> tuple[int, bytes, str] | None:
    """vLLM's refusals of a well-formed request that do not depend on the prompt's length, as (status, body,
    counter); None: served. Dictionary look-ups only, to stay off the hot path's bill."""
    model = body.get("model")
    if config.strict_model and model not in (None, config.model):
        message = f"The model `{model}` does not exist."
        return 404, error_body(404, message, "NotFoundError", "model"), "model"
    if not body["messages"]:
        message = "Cannot apply chat template to an empty conversation. Provide at least one message."
        return 400, error_body(400, message, "BadRequestError"), "bad_request"
    limit = body.get("max_completion_tokens")
    if limit is None:
        limit = body.get("max_tokens")
    if limit is not None:
        if not isinstance(limit, int) or limit < 1:
            return (
                400,
                error_body(400, f"max_tokens must be at least 1, got {limit}.", "BadRequestError", "max_tokens"),
                "bad_request",
            )
        if limit > config.max_model_len:
            message = (
                f"max_tokens={limit} cannot be greater than max_model_len={config.max_model_len}. "
                "Please request fewer output tokens."
            )
            return 400, error_body(400, message, "BadRequestError", "max_tokens"), "context"
    temperature = body.get("temperature")
    if isinstance(temperature, (int, float)) and temperature < 0:
        message = f"temperature must be non-negative, got {temperature}."
        return 400, error_body(400, message, "BadRequestError", "temperature"), "bad_request"
    n = body.get("n")
    if n is not None:
        if not isinstance(n, int) or n < 1:
            return 400, error_body(400, f"n must be at least 1, got {n}.", "BadRequestError"), "bad_request"
        if n > 1 and temperature == 0:
            message = f"n must be 1 when using greedy sampling, got {n}."
            return 400, error_body(400, message, "BadRequestError"), "bad_request"
    choice = body.get("tool_choice")
    if choice is not None:
        tools = body.get("tools")
        if not tools:
            message = "When using `tool_choice`, `tools` must be set."
            return 400, error_body(400, message, "BadRequestError", "tool_choice"), "bad_request"
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if all((tool.get("function") or {}).get("name") != name for tool in tools):
                message = "The tool specified in `tool_choice` does not match any of the specified `tools`"
                return 400, error_body(400, message, "BadRequestError", "tool_choice"), "bad_request"
    return None


def models_body(config: EmulatorConfig) -> bytes:
    """``/v1/models`` with the fields vLLM lists for a served model, ``max_model_len`` included."""
    created = int(time.time())
    permission = {
        "id": "modelperm-emulator",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    model = {
        "id": config.model,
        "object": "model",
        "created": created,
        "owned_by": "emulator",
        "root": config.model,
        "parent": None,
        "max_model_len": config.max_model_len,
        "permission": [permission],
    }
    return json.dumps({"object": "list", "data": [model]}).encode()
