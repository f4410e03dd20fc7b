"""``pacore_solve``'s arguments: the schema clients list, and the strict reading of a call, before anything is sent.

Every refusal is one line that names the argument and says what to send instead; nothing loose is accepted
(``"4"`` is not a round, ``true`` not a number, an unknown argument is refused rather than ignored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage

from pacore_graph.config import PRESETS, Budget, PaCoReConfig, check_schedule_size
from pacore_graph.inputs import json_type, one_line, question_message
from pacore_graph.mcp.limits import McpLimits

TOOL_NAME = "pacore_solve"
MAX_QUESTION_CHARS = 200_000  # the question and context together; a larger one is refused, not sent K times


class Refused(Exception):
    """A call refused before anything was sent; its text is the one line the caller reads."""


@dataclass(frozen=True)
class SolveCall:
    """A checked call: the conversation PaCoRe answers and the config it runs with (the call's budget in it)."""

    messages: list[HumanMessage]
    config: PaCoReConfig


def input_schema(limits: McpLimits) -> dict[str, Any]:
    """The JSON schema ``tools/list`` shows: what a caller may send."""
    budget = f" (this server allows at most {limits.call_tokens})" if limits.call_tokens is not None else ""
    return {
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "minLength": 1,
                "description": "the question, complete: the solver sees nothing else of your conversation",
            },
            "context": {
                "type": "string",
                "description": "facts, code, data or partial work the question needs (optional)",
            },
            "preset": {
                "type": "string",
                "enum": list(PRESETS),
                "description": "how hard to think: low (4 solutions, then a synthesis), medium (16), high (32, then "
                "4, then a synthesis); give preset or rounds, not both (default: the server's)",
            },
            "rounds": {
                "type": "array",
                "items": {"type": "integer", "minimum": 1},
                "description": "solutions per round, e.g. [32, 4]; a synthesis follows (model calls: their sum + 1, "
                f"at most {limits.max_trajectories} here)",
            },
            "max_tokens": {
                "type": "integer",
                "minimum": 1,
                "description": "most tokens this call may spend, over all its model calls (completion tokens, "
                f"reasoning included){budget}; once spent, running solutions stop and the answer comes from those "
                "that finished",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    }


def read_call(arguments: Mapping[str, Any] | None, defaults: PaCoReConfig, limits: McpLimits) -> SolveCall:
    """The call ``arguments`` ask for, or :class:`Refused` with one line saying what is wrong."""
    given = dict(arguments or {})
    unknown = sorted(set(given) - {"question", "context", "preset", "rounds", "max_tokens"})
    if unknown:
        raise Refused(
            f"unknown argument {one_line(repr(unknown[0]), 40)}: pacore_solve takes question, context, preset, "
            "rounds and max_tokens"
        )
    question = _text(given, "question")
    if question is None or not question.strip():
        raise Refused("question is missing or empty: send the whole question as a string")
    context = _text(given, "context")
    if len(question) + len(context or "") > MAX_QUESTION_CHARS:
        raise Refused(f"question and context are longer than {MAX_QUESTION_CHARS:,} characters together: shorten them")
    rounds = _schedule(given, defaults, limits)
    budget = _budget(given, limits)
    update: dict[str, Any] = {"rounds": rounds}
    if budget is not None:
        update["budget"] = Budget(tokens=budget, seconds=defaults.budget.seconds)
    return SolveCall([question_message(question, context)], defaults.model_copy(update=update))


def _text(given: Mapping[str, Any], name: str) -> str | None:
    value = given.get(name)
    if value is None or isinstance(value, str):
        return value
    raise Refused(f"{name} must be a string, not {json_type(value)}")


def _schedule(given: Mapping[str, Any], defaults: PaCoReConfig, limits: McpLimits) -> list[int]:
    preset, rounds = given.get("preset"), given.get("rounds")
    if preset is not None and rounds is not None:
        raise Refused("give preset or rounds, not both")
    if preset is not None:
        if not isinstance(preset, str) or preset not in PRESETS:
            raise Refused(f"preset {one_line(repr(preset), 40)} is unknown: choose one of {', '.join(PRESETS)}")
        schedule = list(PRESETS[preset])
    elif rounds is not None:
        if not isinstance(rounds, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in rounds):
            raise Refused("rounds must be a list of integers, such as [32, 4]")
        try:
            schedule = check_schedule_size(rounds, "rounds")
        except ValueError as exc:
            raise Refused(str(exc)) from None
    else:
        schedule = list(defaults.rounds)
    calls = sum(schedule) + 1
    if calls > limits.max_trajectories:
        raise Refused(
            f"rounds {schedule} make {calls} model calls; this server runs at most {limits.max_trajectories} per call: "
            "ask for fewer"
        )
    return schedule


def _budget(given: Mapping[str, Any], limits: McpLimits) -> int | None:
    """The call's token budget: the caller's max_tokens within the server's limit, else the server's limit."""
    value = given.get("max_tokens")
    if value is None:
        return limits.call_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Refused(f"max_tokens must be a positive integer, not {one_line(json.dumps(value), 40)}")
    if limits.call_tokens is not None and value > limits.call_tokens:
        raise Refused(f"max_tokens {value} is above this server's limit of {limits.call_tokens} tokens per call")
    return int(value)
