"""Read an OpenAI-compatible server-sent-event stream into one assistant message dict.

Whole network chunks are split on newlines: far cheaper than aiohttp's line iterator, which matters at
hundreds of streams in flight. ``on_delta`` sees each delta as it arrives (for token streaming). No SSE
library: the one found that takes raw chunks (assel) costs twice as much per event and shares one UTF-8
decoder among its parsers (docs/performance.md, "Libraries and what they cost"); the OpenAI delta assembly
below, most of this module, is in none of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import Any

import orjson

from pacore_graph.errors import ModelRequestError, status_is_retryable

Delta = dict[str, Any]


def reasoning_of(message: dict[str, Any]) -> str | None:
    """vLLM puts reasoning in ``reasoning`` (newer) or ``reasoning_content`` (older servers)."""
    return message.get("reasoning_content") or message.get("reasoning") or None


class _Assembly:
    """The message so far: content, reasoning and tool-call pieces, finish reason, usage."""

    __slots__ = ("content", "reasoning", "tool_calls", "finish_reason", "usage", "model", "done")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.done = False

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content),
            "finish_reason": self.finish_reason,
            "usage": self.usage,
            "model": self.model,
        }
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": s["id"], "type": "function", "function": {"name": s["name"], "arguments": s["args"]}}
                for _, s in sorted(self.tool_calls.items())
            ]
        return message


async def read_stream(
    chunks: AsyncIterable[bytes], url: str, on_delta: Callable[[Delta], None] | None = None
) -> dict[str, Any]:
    """The assembled assistant message of a 200 streaming response (its body as it arrives); a retryable
    error if it is cut short."""
    state = _Assembly()
    pending = b""
    async for chunk in chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if line.startswith(b"data:") and _event(line, url, state, on_delta):
                break
        if state.done:
            break
    if pending.startswith(b"data:") and not state.done:
        _event(pending, url, state, on_delta)
    if not state.done and state.finish_reason is None:
        raise ModelRequestError(f"stream from {url} ended before it finished", retryable=True, usage=state.usage)
    return state.message()


def _event(line: bytes, url: str, state: _Assembly, on_delta: Callable[[Delta], None] | None) -> bool:
    """Fold one ``data:`` line into the message; True at ``[DONE]``."""
    data = line[5:].strip()
    if data == b"[DONE]":
        state.done = True
        return True
    try:
        piece = orjson.loads(data)
    except ValueError as exc:
        raise ModelRequestError(
            f"malformed stream chunk from {url}: {data[:200]!r}", status=200, retryable=True, usage=state.usage
        ) from exc
    choices = piece.get("choices")
    if not choices:  # usage-only or error events
        if "error" in piece:
            error = piece["error"]
            code = str(error.get("code", "")) if isinstance(error, dict) else ""
            status = int(code) if code.isdigit() else 500
            raise ModelRequestError(
                f"server error in stream from {url}: {error}",
                status=status,
                retryable=status_is_retryable(status),
                usage=piece.get("usage") or state.usage,
            )
        state.usage = piece.get("usage") or state.usage
        state.model = piece.get("model") or state.model
        return False
    if piece.get("usage"):
        state.usage = piece["usage"]
    choice = choices[0]
    delta = choice.get("delta")
    if delta:
        if text := delta.get("content"):
            state.content.append(text)
        if text := reasoning_of(delta):
            state.reasoning.append(text)
        if "tool_calls" in delta:
            for call in delta["tool_calls"] or ():
                slot = state.tool_calls.setdefault(call.get("index", 0), {"id": None, "name": "", "args": ""})
                slot["id"] = slot["id"] or call.get("id")
                function = call.get("function") or {}
                name = function.get("name") or ""
                if name != slot["name"]:  # llama.cpp repeats the whole name in every delta of a call
                    slot["name"] += name
                slot["args"] += function.get("arguments") or ""
        if on_delta is not None:
            on_delta(delta)
    if choice.get("finish_reason"):
        state.finish_reason = choice["finish_reason"]
        state.model = piece.get("model")
    return False
