"""What the model may do in an episode and how its replies are read: the ``bash`` and ``submit`` tools,
or (for models without tool calling) one fenced ```bash block per reply, ``submit`` alone finishing."""

from __future__ import annotations

import re
from typing import Literal

from langchain_core.messages import AIMessage
from pydantic import BaseModel

from pacore_graph.extend import message_text

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run one bash command in the repository (non-interactive; output is cut when long).",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command line to run"}},
            "required": ["command"],
        },
    },
}
SUBMIT_TOOL = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Finish: your changes to the repository are the fix. Call it once, when done.",
        "parameters": {
            "type": "object",
            "properties": {"note": {"type": "string", "description": "one or two sentences on what you changed"}},
        },
    },
}

NO_ACTION = (
    "No action found. Use the `bash` tool to run a command, or call `submit` when the fix is done "
    "(without tool calling: exactly one ```bash block per reply; a block holding only `submit` finishes)."
)


class Action(BaseModel):
    """One thing the model asked for: a command, or the submission."""

    kind: Literal["bash", "submit", "invalid"]
    command: str = ""
    note: str = ""
    call_id: str | None = None  # the tool call it answers; None for a fenced block
    error: str = ""


_BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)


def parse_actions(message: AIMessage) -> list[Action]:
    """The actions of one model reply: its tool calls, else its fenced bash block."""
    text = message_text(message)
    actions: list[Action] = []
    for call in message.tool_calls:
        name, args = call.get("name"), call.get("args") or {}
        if name == "bash" and str(args.get("command", "")).strip() == "submit":
            actions.append(Action(kind="submit", note=text, call_id=call.get("id")))
        elif name == "bash" and isinstance(args.get("command"), str) and args["command"].strip():
            actions.append(Action(kind="bash", command=args["command"], call_id=call.get("id")))
        elif name == "submit":
            actions.append(Action(kind="submit", note=str(args.get("note") or text), call_id=call.get("id")))
        else:
            error = f"unknown tool {name!r}" if name not in ("bash", "submit") else "bash needs a non-empty command"
            actions.append(Action(kind="invalid", call_id=call.get("id"), error=error))
    for invalid in message.invalid_tool_calls:
        actions.append(
            Action(kind="invalid", call_id=invalid.get("id"), error=f"unreadable arguments: {invalid.get('error')}")
        )
    if actions:
        return actions
    blocks = _BLOCK.findall(text)
    if len(blocks) != 1:
        return []
    command = blocks[0].strip()
    if command == "submit" or command.startswith("submit\n"):
        note = prose(message) or command[len("submit") :].strip()
        return [Action(kind="submit", note=note)]
    return [Action(kind="bash", command=command)]


def prose(message: AIMessage) -> str:
    """The reply's text outside its fenced blocks (what the model said, not what it ran)."""
    return _BLOCK.sub("", message_text(message)).strip()


def format_observation(exit_code: int, output: str, timed_out: bool, timeout: float) -> str:
    """What the model sees of a command: its exit status (or timeout), then its (already cut) output."""
    status = f"timed out after {timeout:g} s and was killed" if timed_out else f"exit code {exit_code}"
    return f"[{status}]\n{output}" if output else f"[{status}, no output]"
