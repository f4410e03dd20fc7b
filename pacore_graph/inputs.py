"""Input from outside the process (an HTTP request body, a ``--messages-file``), parsed strictly and checked
field by field, so that a bad one is refused in one line before anything is spent.

Why strict: Python's ``json`` reads ``NaN`` / ``Infinity`` (which no other JSON reader accepts, so they would
reach the upstream as invalid JSON), strings with lone surrogates (which cannot be encoded to send), and
nesting deep enough to exhaust the stack later; LangChain's message conversion turns a wrong-typed field
into a traceback far from its cause. Each check here names the field (``param``) the way OpenAI's errors do.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from pacore_graph.errors import UsageError
from pacore_graph.synthesis.prompt import message_text

MAX_DEPTH = 100  # nesting of arrays and objects; a tool's JSON schema needs a few dozen at most
MAX_INTEGER = 2**63  # beyond 64 bits no server reads a number as the integer it was
ROLES = ("system", "developer", "user", "assistant", "tool")
TEXT_ONLY_ROLES = ("system", "developer", "tool")
_SURROGATE = re.compile("[\ud800-\udfff]")


class InputError(ValueError):
    """One thing wrong with an input, in one line; ``param`` names where (``messages[2].content``), or None."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:20]} is too large to be represented")
    return value


def parse_json(raw: bytes | str, where: str = "the request body") -> Any:
    """JSON as every other reader reads it: no NaN or Infinity, finite numbers, Unicode strings, bounded nesting."""
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise InputError(f"{where} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the refusals above, too many digits
        raise InputError(f"{where} is not valid JSON ({one_line(str(exc))})") from None
    check_json_values(value, where)
    return value


def read_json_file(path: str, where: str) -> Any:
    """A JSON file a command was given (``where`` names the flag and file): unreadable or not JSON is one line."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {exc.strerror or exc}") from None
    return parse_json(raw, where)


def check_json_values(value: Any, where: str) -> None:
    """Refuse nesting beyond :data:`MAX_DEPTH`, strings with lone surrogates and integers beyond 64 bits."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise InputError(f"{where} holds a string with a lone surrogate (\\ud800-\\udfff): not valid Unicode")
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            if not -MAX_INTEGER <= item < MAX_INTEGER:
                raise InputError(f"{where} holds an integer beyond 64 bits")
        elif depth > MAX_DEPTH:
            raise InputError(f"{where} is nested too deeply (at most {MAX_DEPTH} levels)")
        elif isinstance(item, dict):
            stack.extend((key, depth) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


# ---------------------------------------------------------------------------------------------- messages


def check_messages(messages: Any, where: str = "messages") -> None:
    """OpenAI-style chat messages: a non-empty list of message objects, each with the fields its role needs,
    each field of the type OpenAI documents (content a string or a list of content parts)."""
    if not isinstance(messages, list):
        raise InputError(f"{where} must be a list of messages, not {json_type(messages)}", where)
    if not messages:
        raise InputError(f"{where} is empty: PaCoRe needs at least one user message", where)
    for position, message in enumerate(messages):
        check_message(message, f"{where}[{position}]")


def check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise InputError(
            f'{where} must be a message object such as {{"role": "user", "content": "..."}}, not {json_type(message)}',
            where,
        )
    role = message.get("role")
    if role not in ROLES:
        shown = role if isinstance(role, str) else json_type(role)
        raise InputError(
            f"{where}.role is {one_line(repr(shown), 60)}: expected one of {', '.join(ROLES)}", f"{where}.role"
        )
    content = message.get("content")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise InputError(
                f"{where} is a {role} message with tool_calls: only assistant messages make calls",
                f"{where}.tool_calls",
            )
        check_tool_calls(tool_calls, f"{where}.tool_calls")
    if content is None:
        if role != "assistant" or not tool_calls:
            needs = "content or tool_calls" if role == "assistant" else "content"
            raise InputError(f"{where} has no content: a {role} message needs {needs}", f"{where}.content")
    else:
        check_content(content, f"{where}.content", role)
    for name in ("name", "tool_call_id"):
        if message.get(name) is not None and not isinstance(message[name], str):
            raise InputError(f"{where}.{name} must be a string, not {json_type(message[name])}", f"{where}.{name}")
    if role == "tool" and not message.get("tool_call_id"):
        raise InputError(f"{where} is a tool message without tool_call_id", f"{where}.tool_call_id")


def check_content(content: Any, where: str, role: str) -> None:
    """A string, or a list of content parts (objects with a ``type``; text parts with a string ``text``)."""
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InputError(f"{where} must be a string or a list of content parts, not {json_type(content)}", where)
    for position, part in enumerate(content):
        at = f"{where}[{position}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InputError(f'{at} must be a content part such as {{"type": "text", "text": "..."}}', at)
        kind = part["type"]
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise InputError(f"{at}.text must be a string, not {json_type(part.get('text'))}", f"{at}.text")
        elif role in TEXT_ONLY_ROLES or (role == "assistant" and kind != "refusal"):
            raise InputError(f"{at} is a {one_line(repr(kind), 40)} part: {role} messages hold text only", at)


def check_tool_calls(calls: Any, where: str) -> None:
    """An assistant's earlier calls: ``[{"id", "type": "function", "function": {"name", "arguments"}}]``."""
    if not isinstance(calls, list):
        raise InputError(f"{where} must be a list of tool calls, not {json_type(calls)}", where)
    for position, call in enumerate(calls):
        at = f"{where}[{position}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise InputError(
                f'{at} must be {{"id": ..., "type": "function", "function": {{"name": ..., "arguments": "..."}}}}', at
            )
        if call.get("type", "function") != "function":
            raise InputError(f"{at}.type must be 'function'", f"{at}.type")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InputError(f"{at}.id must be a non-empty string", f"{at}.id")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise InputError(f"{at}.function.name must be a non-empty string", f"{at}.function.name")
        if not isinstance(function.get("arguments"), str):
            raise InputError(
                f"{at}.function.arguments must be a string (JSON text), not {json_type(function.get('arguments'))}",
                f"{at}.function.arguments",
            )


def check_problem_text(messages: Sequence[BaseMessage], position: int, where: str = "messages") -> None:
    """PaCoRe's synthesis prompt quotes the last user message's text as the Original Problem: it must have some.

    (Image or audio parts of that message reach the first round only; the synthesis prompt is text.)
    """
    if not message_text(messages[position]).strip():
        raise InputError(
            f"{where}[{position}] (the last user message) has no text: PaCoRe quotes it as the Original Problem of "
            "its synthesis prompt, so it needs the problem in words (images alone cannot be quoted)",
            f"{where}[{position}].content",
        )


def question_message(question: str, context: str | None = None) -> HumanMessage:
    """A question handed over by a tool call (``pacore_tool``, ``pacore mcp``) as the one user message PaCoRe
    answers: the context first, labelled, when there is one (the synthesis prompt quotes the whole message)."""
    if context is None or not context.strip():
        return HumanMessage(question.strip())
    return HumanMessage(f"Context:\n{context.strip()}\n\nQuestion:\n{question.strip()}")
