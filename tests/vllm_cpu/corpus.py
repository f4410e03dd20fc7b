"""Requests, good and bad, that the serving emulator must answer as real vLLM does, reduced to comparable shapes.

A shape keeps what a client relies on (HTTP status, error body, keys and their types, ``id`` prefixes, ``object``,
finish reasons, roles, the order of stream chunks) and drops what differs by nature (the generated text, token
counts, ids, times). ``DELIBERATE`` names the differences the emulator keeps, each with its reason; the page
docs/emulator-and-vllm.md shows the same table to users.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from typing import Any

MODEL = "smollm2"
HI = [{"role": "user", "content": "Say hi."}]
SKY = [{"role": "user", "content": "Answer with one word: is the sky blue?"}]  # SmolLM2 stops after ~17 tokens
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
GET_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": CITY}}
# No parameters: a forced call fits in 32 tokens of the 135M model
NOW = {
    "type": "function",
    "function": {"name": "now", "description": "current time", "parameters": {"type": "object", "properties": {}}},
}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "reply",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    },
}
CAT = "cat "  # one token for vLLM, four characters (one token) for the emulator's estimate


@dataclass
class Case:
    """One request: a JSON body (or raw bytes) to a path under the OpenAI base URL."""

    name: str
    body: Any = None
    method: str = "POST"
    path: str = "/chat/completions"
    raw: bytes | None = None

    def payload(self) -> bytes | None:
        if self.raw is not None:
            return self.raw
        return None if self.body is None else json.dumps(self.body).encode()


def chat(name: str, messages: Any = HI, **fields: Any) -> Case:
    """A chat completion, greedy and short unless ``fields`` say otherwise."""
    body = {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0, **fields}
    return Case(name, {key: value for key, value in body.items() if value is not ...})


def stream(name: str, messages: Any = HI, usage: bool = True, **fields: Any) -> Case:
    options = {"stream_options": {"include_usage": True}} if usage else {}
    return chat(name, messages, stream=True, **options, **fields)


CORPUS: list[Case] = [
    # plain replies
    chat("plain"),
    chat("plain_stop", SKY, max_tokens=32),
    chat(
        "second_turn_roles",
        [
            {"role": "system", "content": "Be brief."},
            *HI,
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Again."},
        ],
        max_tokens=4,
    ),
    chat("bad_role_robot", [{"role": "robot", "content": "beep"}], max_tokens=4),
    chat("n_2", n=2, temperature=0.7, max_tokens=4),
    # tools, every tool_choice
    chat("tools_default", WEATHER, tools=[GET_WEATHER]),
    chat("tool_choice_auto", WEATHER, tools=[GET_WEATHER], tool_choice="auto"),
    chat("tool_choice_none", WEATHER, tools=[GET_WEATHER], tool_choice="none"),
    chat("tool_choice_required", WEATHER, tools=[NOW], tool_choice="required", max_tokens=32),
    chat(
        "tool_choice_named",
        WEATHER,
        tools=[NOW, GET_WEATHER],
        tool_choice={"type": "function", "function": {"name": "now"}},
        max_tokens=32,
    ),
    chat(
        "tool_choice_named_unknown", WEATHER, tools=[NOW], tool_choice={"type": "function", "function": {"name": "x"}}
    ),
    chat("tool_choice_without_tools", WEATHER, tool_choice="required"),
    # structured output
    chat("json_object", response_format={"type": "json_object"}),
    chat("json_schema", response_format=SCHEMA, max_tokens=32),
    # streams
    stream("stream_usage", max_tokens=4),
    stream("stream_stop", SKY, max_tokens=32),
    stream("stream_no_usage", usage=False, max_tokens=2),
    stream("stream_n_2", n=2, temperature=0.7, max_tokens=2),
    stream(
        "stream_tool_named",
        WEATHER,
        tools=[NOW],
        tool_choice={"type": "function", "function": {"name": "now"}},
        max_tokens=32,
    ),
    stream("stream_unknown_model", model="no-such-model"),
    # the window (2048 tokens in tests/vllm_cpu/conftest.py)
    chat("max_tokens_over_window", max_tokens=4000),
    chat("prompt_plus_max_tokens_over_window", [{"role": "user", "content": CAT * 2025}], max_tokens=2000),
    chat("prompt_over_window", [{"role": "user", "content": CAT * 2100}]),
    # bad requests
    chat("unknown_model", model="no-such-model"),
    chat("missing_messages", ...),
    chat("messages_not_a_list", "hi"),
    chat("empty_messages", []),
    chat("message_without_role", [{"content": "hi"}]),
    chat("max_tokens_zero", max_tokens=0),
    chat("temperature_negative", temperature=-1),
    chat("n_zero", n=0),
    chat("n_2_greedy", n=2),
    Case("invalid_json", raw=b"{not json"),
    Case("empty_body", raw=b""),
    Case("body_a_list", [1, 2]),
    # other routes
    Case("models", method="GET", path="/models"),
    Case("models_post", {}, path="/models"),
    Case("chat_get", method="GET"),
    Case("unknown_path", method="GET", path="/no-such-path"),
]


@dataclass
class Deliberate:
    """A difference the emulator keeps: shape paths (globs) in cases (globs), and why."""

    cases: str
    paths: tuple[str, ...]
    reason: str
    seen: set[str] = field(default_factory=set)

    def covers(self, case: str, path: str) -> bool:
        return fnmatch.fnmatchcase(case, self.cases) and any(fnmatch.fnmatchcase(path, p) for p in self.paths)


# vLLM fields that are always null (or constant) for this model and these requests; clients do not need them. The
# emulator's ``reasoning`` styles stand for a reasoning parser; SmolLM2 is served without one (style "none").
VLLM_NULL_EXTRAS = (
    "body.usage.prompt_tokens_details",
    "body.usage.completion_tokens_details",
    "body.service_tier",
    "body.system_fingerprint",
    "body.prompt_logprobs",
    "body.prompt_token_ids",
    "body.prompt_text",
    "body.kv_transfer_params",
    "body.ec_transfer_params",
    "body.metrics",
    "body.choices[].stop_reason",
    "body.choices[].token_ids",
    "body.choices[].routed_experts",
    "body.choices[].message.refusal",
    "body.choices[].message.annotations",
    "body.choices[].message.audio",
    "body.choices[].message.function_call",
    "body.choices[].message.reasoning",
    "*_chunk.prompt_token_ids",
    "*_chunk.prompt_text",
    "*_chunk.choices[].token_ids",
    "*_chunk.choices[].stop_reason",
    "*_chunk.system_fingerprint",
)


def deliberate() -> list[Deliberate]:
    """A fresh list (each run records which entries it met)."""
    return [
        Deliberate(
            "*",
            VLLM_NULL_EXTRAS,
            "vLLM-only fields, null here (system_fingerprint: a version string); the "
            "emulator leaves them out to stay cheap, and OpenAI clients treat absent as null",
        ),
        Deliberate(
            "stream_*",
            ("finish_chunk.choices[].delta*",),
            'vLLM puts the last token in the chunk that finishes on "length"; the emulator\'s finish chunk '
            'has an empty delta (as vLLM\'s does on "stop"): concatenating every delta gives the text',
        ),
        Deliberate(
            "stream_n_2",
            ("order",),
            "n > 1: vLLM sends each choice's finish chunk when that choice ends; the emulator sends all finish "
            "chunks after the last token",
        ),
        Deliberate(
            "json_object",
            ("body.choices[].finish_reason", "content_json"),
            "json_object: the emulator answers {} at once; the 135M model writes JSON until max_tokens",
        ),
        Deliberate(
            "message_without_role",
            ("status", "body.*", "content_json"),
            "the emulator does not validate each message (that costs CPU on every request); vLLM answers 400 "
            "with a list of validation errors",
        ),
    ]


# ------------------------------------------------------------------------------------------------- shapes

VALUE_KEYS = {"object", "finish_reason", "role", "type", "param", "code", "detail", "index"}
_PREFIX = re.compile(r"^((?:[a-z]+-)+)")


def _leaf(key: str, value: Any) -> str:
    kind = "null" if value is None else type(value).__name__
    if key in ("id",) and isinstance(value, str):
        match = _PREFIX.match(value)
        return f"str:{match.group(1) if match else ''}"
    if key in VALUE_KEYS and value is not None and not isinstance(value, (dict, list)):
        return f"{kind}:{value}"
    return kind


def flatten(value: Any, prefix: str, out: dict[str, set[str]], key: str = "") -> None:
    """Every path of a JSON value with the types (and for a few keys the values) found there; lists merge their
    items under ``[]``."""
    if isinstance(value, dict) and value:
        for name, item in value.items():
            flatten(item, f"{prefix}.{name}", out, name)
    elif isinstance(value, list) and value:
        for item in value:
            flatten(item, f"{prefix}[]", out, key)
    else:
        leaf = _leaf(key, value)
        if isinstance(value, (dict, list)):
            leaf = "dict:empty" if isinstance(value, dict) else "list:empty"
        out.setdefault(prefix, set()).add(leaf)


def _category(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices")
    if choices == [] and "usage" in chunk:
        return "usage_chunk"
    if any(choice.get("finish_reason") for choice in choices or []):
        return "finish_chunk"
    if any("role" in (choice.get("delta") or {}) for choice in choices or []):
        return "role_chunk"
    return "token_chunk"


def shape(status: int, content_type: str, raw: bytes) -> dict[str, str]:
    """What a client relies on in one response, as ``{path: description}``."""
    out: dict[str, set[str]] = {"status": {str(status)}}
    text = raw.decode("utf-8", "replace")
    if content_type.startswith("text/event-stream"):
        events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        out["stream.done"] = {str(bool(events) and events[-1] == "[DONE]")}
        order: list[str] = []
        for event in events:
            if event == "[DONE]":
                continue
            chunk = json.loads(event)
            category = _category(chunk)
            flatten(chunk, category, out)
            if not order or order[-1] != category:
                order.append(category)
        out["order"] = {" ".join(order)}
    elif text.strip():
        body = json.loads(text)
        flatten(body, "body", out)
        for choice in body.get("choices") or [] if isinstance(body, dict) else []:
            content = (choice.get("message") or {}).get("content")
            try:
                parsed = json.loads(content) if isinstance(content, str) else None
                out.setdefault("content_json", set()).add(type(parsed).__name__)
            except ValueError:
                out.setdefault("content_json", set()).add("not json")
    else:
        out["body"] = {"empty"}
    return {path: "|".join(sorted(kinds)) for path, kinds in out.items()}


def differences(case: str, vllm: dict[str, str], emulator: dict[str, str]) -> list[tuple[str, str, str]]:
    """(path, vLLM's, the emulator's) for every path whose description differs ("-" where one lacks it)."""
    return [
        (path, vllm.get(path, "-"), emulator.get(path, "-"))
        for path in sorted(vllm.keys() | emulator.keys())
        if vllm.get(path) != emulator.get(path)
    ]


def unexplained(case: str, found: list[tuple[str, str, str]], allowed: list[Deliberate]) -> list[tuple[str, str, str]]:
    """The differences no deliberate entry covers (marking the entries that covered one as seen)."""
    left = []
    for path, theirs, ours in found:
        entry = next((entry for entry in allowed if entry.covers(case, path)), None)
        if entry is None:
            left.append((path, theirs, ours))
        else:
            entry.seen.add(case)
    return left


# Differences the corpus does not exercise (the parity test runs the emulator with --clamp-max-tokens and one name)
NOT_COMPARED = {
    "logprobs": "the emulator answers null; vLLM's CPU build spends minutes on its first logprobs request",
    "served names": "the emulator serves one --model name; vLLM every --served-model-name",
    "window default": "without --clamp-max-tokens the emulator refuses prompt + max_tokens over the window (400), "
    "as vLLM before 0.32 and OpenAI do; tests of context overflow rely on it",
    "ids": "the emulator's ids have 24 hex digits (a digest of the request), vLLM's 16; only prefixes compared",
}
