"""LangChain's ``tool_choice`` values in OpenAI's form, checked against the tools before anything is sent; tools
marked strict unless they say otherwise.

LangChain says "any" (or True) for "call some tool" and a bare name for "call this tool"; OpenAI, vLLM and
llama.cpp say "required" and ``{"type": "function", "function": {"name": ...}}``. vLLM answers a name that is
not among the tools with a 400 (llama.cpp with a 500): refused here with the names there are.
"""

from __future__ import annotations

from typing import Any

OPENAI_CHOICES = ("auto", "none", "required")


def openai_tool_choice(
    choice: str | dict[str, Any] | bool | None, tools: list[dict[str, Any]]
) -> str | dict[str, Any] | None:
    """``choice`` as OpenAI's ``tool_choice`` (None: leave it to the server), for ``tools`` in OpenAI form."""
    if choice is None or choice is False:
        return None
    if choice is True or choice == "any":
        return "required"
    if isinstance(choice, str) and choice in OPENAI_CHOICES:
        return choice
    name = choice if isinstance(choice, str) else (choice.get("function") or {}).get("name")
    if not isinstance(name, str):
        raise ValueError(f"tool_choice {choice!r} is none of 'auto', 'none', 'any', 'required', a tool name or True")
    offered = [tool.get("function", {}).get("name") for tool in tools]
    if name not in offered:
        raise ValueError(f"tool_choice names {name!r}, which is not among the bound tools {offered}")
    return {"type": "function", "function": {"name": name}}


def strict_tools(tools: list[dict[str, Any]], strict: bool | None = None) -> list[dict[str, Any]]:
    """``tools`` (OpenAI form) with ``"strict": strict`` on each function that does not set ``strict`` itself;
    ``strict=None`` (a caller that did not say) means strict.

    Why here: LangChain's ``convert_to_openai_tool(tool, strict=...)`` applies ``strict`` to a tool object or a
    function, but leaves a tool already in OpenAI form as it is, so a tool list formatted once (by a wrapper, or
    by an agent) would lose the caller's ``strict``. vLLM holds a tool call's arguments to the tool's schema only
    for strict tools: for others its hermes parser can hand a forced call's arguments back as a JSON string
    (``"\\"Paris\\""``) instead of an object. vLLM needs nothing else of a strict schema (OpenAI's own API also
    wants every property required and no others allowed).
    """
    value = True if strict is None else strict
    marked = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, dict) and "strict" not in function:
            tool = {**tool, "function": {**function, "strict": value}}
        marked.append(tool)
    return marked
