"""A scripted model for ``MockOpenAIServer``: replies that follow the request as a capable model would.

LangChain's standard tests (and agent tests) need a model that calls a tool when told to, fills its arguments
from the prompt ("magic_function(3)" -> ``{"input": 3}``), answers a tool result, and returns JSON that fits a
``response_format``. The reply is a function of the request alone (PaCoRe's parallel trajectories ask the same
thing), and every PaCoRe synthesis prompt still holds the original problem, so the synthesis acts alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

TEXT = "Hello! I am a scripted model, and I am doing well."
JOKE = {"setup": "Why did the cat sit on the computer?", "punchline": "To keep an eye on the mouse."}
_WANTS_TOOL = re.compile(r"\b(use|using) the tool\b|\btool\b.*\?|\bcreate a customer\b|weather in", re.I)


def scripted_reply(body: dict[str, Any], attempt: int = 1) -> dict[str, Any]:
    """What the scripted model says to ``body`` (a chat-completions request)."""
    messages = body["messages"]
    last = messages[-1]
    prompt = text_of(last.get("content"))
    tools = [tool["function"] for tool in body.get("tools") or ()]
    choice = body.get("tool_choice")
    fmt = body.get("response_format") or {}
    usage = {"prompt_tokens": 9 * len(messages), "completion_tokens": 7, "total_tokens": 9 * len(messages) + 7}
    forced = choice == "required" or isinstance(choice, dict)
    if tools and (last.get("role") != "tool" or forced) and choice != "none":
        named = choice["function"]["name"] if isinstance(choice, dict) else None
        if forced or _WANTS_TOOL.search(prompt) or any(tool["name"] in prompt for tool in tools):
            if last.get("role") == "tool":  # forced after a tool result: a tool not called yet (an answer schema)
                called = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
                tools = [t for t in tools if t["name"] not in called] or tools
                prompt = next(text_of(m.get("content")) for m in reversed(messages) if m["role"] == "user")
            tool = next((t for t in tools if t["name"] == named), None) or pick_tool(tools, prompt)
            arguments = json.dumps(fill(tool.get("parameters") or {}, prompt), ensure_ascii=False)
            call = {
                "id": f"call_{abs(hash((prompt, tool['name']))) % 10**8}",
                "type": "function",
                "function": {"name": tool["name"], "arguments": arguments},
            }
            return {"content": "", "tool_calls": [call], "finish_reason": "tool_calls", "usage": usage}
    if fmt.get("type") == "json_schema":
        return {"content": json.dumps(fill(fmt["json_schema"].get("schema") or {}, prompt)), "usage": usage}
    if fmt.get("type") == "json_object":
        keys = re.findall(r"'(\w+)'", prompt) or ["answer"]
        return {"content": json.dumps({key: JOKE.get(key, f"the {key}") for key in keys}), "usage": usage}
    if last.get("role") == "tool":
        return {"content": f"The tool answered: {text_of(last.get('content'))}", "usage": usage}
    return {"content": TEXT, "reasoning_content": "The user greets me; I greet back.", "usage": usage}


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def pick_tool(tools: list[dict[str, Any]], prompt: str) -> dict[str, Any]:
    """The tool the prompt names, else the one with most words of its name in the prompt, else the first."""
    named = next((tool for tool in tools if tool["name"] in prompt), None)
    if named is not None:
        return named
    words = set(re.findall(r"[a-z]+", original_problem(prompt).lower()))
    return max(tools, key=lambda tool: sum(part in words for part in tool["name"].lower().split("_") if len(part) > 2))


def original_problem(prompt: str) -> str:
    """The problem inside a PaCoRe synthesis prompt (arguments come from it, not from the references)."""
    match = re.search(r"Original Problem:\n(.*?)\n\nReference Responses:", prompt, re.S)
    return match.group(1) if match else prompt


def fill(schema: dict[str, Any], prompt: str) -> Any:
    """A value of ``schema`` drawn from the prompt: its integers in order, its quoted text, else a plain value."""
    prompt = original_problem(prompt)
    numbers = iter(int(n) for n in re.findall(r"-?\d+", prompt))
    quoted = iter(re.findall(r"'([^']+)'", prompt))
    definitions = schema.get("$defs") or schema.get("definitions") or {}

    def value(spec: dict[str, Any], name: str) -> Any:
        if "$ref" in spec:
            spec = definitions.get(spec["$ref"].rsplit("/", 1)[-1], {})
        if "anyOf" in spec:
            spec = next((s for s in spec["anyOf"] if s.get("type") != "null"), spec["anyOf"][0])
        if "enum" in spec:
            return spec["enum"][0]
        kind = spec.get("type", "string")
        if kind == "object":
            properties = spec.get("properties") or {}
            return {key: value(sub, key) for key, sub in properties.items()}
        if kind == "array":
            return [value(spec.get("items") or {}, name)]
        if kind == "integer":
            return next(numbers, 3)
        if kind == "number":
            return float(next(numbers, 3))
        if kind == "boolean":
            return True
        if name in JOKE:
            return JOKE[name]
        return next(quoted, None) or (re.findall(r"\b[A-Z][a-z]+\b", prompt) or [f"a {name}"])[-1]

    return value(schema, "")


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A tool call in OpenAI's form, as a scripted reply carries it."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
