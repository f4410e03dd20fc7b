"""A request's ``tools`` and ``tool_choice``, checked as OpenAI and vLLM check them, before anything is spent.

Why here and not upstream: PaCoRe sends the tools with every trajectory of every round, so a tool the
upstream refuses would be refused K times over (or, on a lenient server, silently ignored). vLLM refuses a
named ``tool_choice`` that is not among the tools; OpenAI refuses ``parameters`` that are not a JSON schema
of an object and a ``tool_choice`` without tools.
"""

from __future__ import annotations

from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from pacore_graph.inputs import InputError, json_type, one_line

TOOL_SHAPE = '{"type": "function", "function": {"name": ..., "parameters": {JSON schema}}}'


def check_tools(tools: list[Any] | None) -> None:
    """Each tool a function with a string name (names unique) and, when given, a JSON schema of an object."""
    names: set[str] = set()
    for position, tool in enumerate(tools or ()):
        where = f"tools[{position}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise InputError(f"{where} must be {TOOL_SHAPE}", where)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
        if name in names:
            raise InputError(f"{where}: a second tool named {one_line(repr(name), 70)}", f"{where}.function.name")
        names.add(name)
        if function.get("description") is not None and not isinstance(function["description"], str):
            raise InputError(f"{where}.function.description must be a string", f"{where}.function.description")
        if function.get("parameters") is not None:
            check_parameters(function["parameters"], f"{where}.function.parameters")


def check_parameters(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        raise InputError(f"{where} must be a JSON schema object, not {json_type(schema)}", where)
    if "type" in schema and schema["type"] != "object":
        raise InputError(
            f"{where} must describe an object (type 'object'), not {one_line(repr(schema['type']), 40)}", where
        )
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        at = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in exc.path)
        raise InputError(f"{where}{at} is not a valid JSON schema: {one_line(exc.message, 120)}", where) from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise InputError(f"{where} is not a valid JSON schema ({type(exc).__name__})", where) from None


def check_tool_choice(choice: str | dict[str, Any] | None, tools: list[Any] | None) -> None:
    """``"none"`` / ``"auto"`` always; ``"required"`` and a named function only with tools, the name among them."""
    if choice is None or choice in ("none", "auto"):
        return
    if choice == "required":
        if not tools:
            raise InputError('tool_choice "required" needs tools: the request offers none', "tool_choice")
        return
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise InputError(
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    offered = [tool["function"]["name"] for tool in tools or ()]
    if name not in offered:
        listed = ", ".join(map(repr, offered)) if offered else "no tools"
        raise InputError(
            f"tool_choice names the function {one_line(repr(name), 70)}, which is not among the "
            f"tools offered ({one_line(listed, 120)})",
            "tool_choice",
        )
