"""Compaction: a trajectory keeps only its conclusion; its reasoning never reaches the next round."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True, slots=True)
class Compacted:
    conclusion: str
    reasoning: str
    truncated: bool


def compact(content: str, reasoning: str | None = None, finish_reason: str | None = None) -> Compacted:
    """Split one final message into reasoning and conclusion.

    With a server-side reasoning parser (vLLM), the reasoning arrives in its own field and ``content`` is
    the conclusion. Without one, the conclusion is what follows the last ``</think>``; an opened
    ``<think>`` that never closes is all reasoning (no conclusion). ``truncated`` marks a generation cut
    by the length limit.
    """
    truncated = finish_reason == "length"
    content = content or ""
    reasoning = reasoning or ""
    if THINK_CLOSE in content:
        head, _, conclusion = content.rpartition(THINK_CLOSE)
        head = head.replace(THINK_OPEN, "", 1) if head.lstrip().startswith(THINK_OPEN) else head
        reasoning = f"{reasoning}{head}" if reasoning else head
        return Compacted(conclusion, reasoning.strip(), truncated)
    if content.lstrip().startswith(THINK_OPEN):
        return Compacted("", (reasoning + content.lstrip()[len(THINK_OPEN) :]).strip(), truncated)
    return Compacted(content, reasoning, truncated)


def render_tool_calls(tool_calls: Sequence[Mapping[str, Any]]) -> str:
    """One line per call, ``Tool call: name({"arg": "value"})``: how the next round reads a trajectory's calls."""
    lines = []
    for call in tool_calls:
        args = json.dumps(call.get("args") or {}, ensure_ascii=False)
        lines.append(f"Tool call: {call.get('name', '')}({args})")
    return "\n".join(lines)


def reference_text(conclusion: str, tool_calls: Sequence[Mapping[str, Any]] = ()) -> str:
    """A trajectory as the next round's template shows it: its conclusion, then its tool calls if any.

    A trajectory of a tool-using model may end in calls instead of (or after) text; the synthesis must see
    which tools it would call with which arguments, or the final round could not weigh them.
    """
    if not tool_calls:
        return conclusion
    calls = render_tool_calls(tool_calls)
    return f"{conclusion.rstrip()}\n\n{calls}" if conclusion.strip() else calls
