"""An episode as plain JSON: what a trajectory file keeps of it (actions, outputs, tokens, patch, note)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from pacore_graph.extend import RoundRecord, message_text


def episode_record(state: dict[str, Any], row: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Everything about one finished episode, JSON-ready: actions, outputs, tokens, patch, note."""
    messages = state.get("messages") or []
    prompt = completion = 0
    for message in messages:
        usage = getattr(message, "usage_metadata", None) or {}
        prompt += usage.get("input_tokens", 0)
        completion += usage.get("output_tokens", 0)
    return {
        "instance_id": row.get("instance_id"),
        "stop_reason": state.get("stop_reason") or "error",
        "steps": state.get("steps", 0),
        "patch": state.get("patch", ""),
        "note": state.get("note", ""),
        "error": state.get("error"),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "seconds": round(seconds, 3),
        "messages": [message_record(m) for m in messages],
    }


def message_record(message: BaseMessage) -> dict[str, Any]:
    """A message as plain JSON, tool calls and usage kept."""
    record: dict[str, Any] = {"role": message.type, "content": message_text(message)}
    if isinstance(message, AIMessage):
        if message.tool_calls:
            record["tool_calls"] = [
                {"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in message.tool_calls
            ]
        if message.usage_metadata:
            record["usage"] = dict(message.usage_metadata)
        reasoning = message.additional_kwargs.get("reasoning_content")
        if reasoning:
            record["reasoning"] = reasoning
        rounds = pacore_rounds(message)
        if rounds is not None:
            record["pacore"] = rounds
    if isinstance(message, ToolMessage):
        record["tool_call_id"] = message.tool_call_id
    return record


def pacore_rounds(message: AIMessage) -> list[dict[str, Any]] | None:
    """Per round of a reply that was a PaCoRe run (``--protocol per-call``): K, failures, tokens; else None."""
    account = message.response_metadata.get("pacore")
    if not account:
        return None
    return [RoundRecord.model_validate(r).counts() if "trajectories" in r else r for r in account["rounds"]]
