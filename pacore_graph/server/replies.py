"""A finished PaCoRe run in OpenAI's reply format: ``chat.completion`` and ``chat.completion.chunk`` objects.

- ``message.content``: the final trajectory's conclusion (the answer); ``message.reasoning_content``: its
  reasoning, when it had any (that of the trajectory a selector chose, when one chose the answer);
  ``message.tool_calls``: its tool calls.
- ``finish_reason``: the final trajectory's.
- ``usage.completion_tokens``: effective TTC, the completion tokens of every trajectory of every round
  (what the upstream generated for this answer); ``usage.prompt_tokens``: their prompt tokens.
- ``usage.pacore``: the extension with the per-round breakdown, ``rounds``: one entry per round with
  ``round``, ``k``, ``completion_tokens``, ``prompt_tokens``, ``failed``; and ``ttc_approximate``; a panel run
  also ``models``: its account per model (trajectories, requests, tokens, seconds, failures, agreement).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from langchain_core.messages import AIMessage

from pacore_graph.graph.runner import chosen_trajectory
from pacore_graph.records import PaCoReResult
from pacore_graph.synthesis.compaction import compact


def new_completion_id() -> str:
    return f"chatcmpl-pacore-{uuid.uuid4().hex}"


class ReplyHeader:
    """The fields every object of one reply shares."""

    def __init__(self, model: str):
        self.id = new_completion_id()
        self.created = int(time.time())
        self.model = model

    def fields(self, object: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
        }


def answer_reasoning(result: PaCoReResult) -> str | None:
    """The reasoning (from the run's trace) of the trajectory whose conclusion is the answer: the final
    synthesis, or the one a selector (``final_selector="vote"``, an early stop) chose; None without any."""
    chosen = chosen_trajectory(result.rounds, result.outcome)
    if chosen is None or not result.trajectories:
        return None
    for trajectory in result.trajectories:
        if trajectory.extra.get("round_index") == chosen.round_index and trajectory.extra.get("index") == chosen.index:
            return compact(trajectory.content, trajectory.reasoning, trajectory.finish_reason).reasoning or None
    return None


def openai_tool_calls(message: AIMessage) -> list[dict[str, Any]]:
    return [
        {
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["args"], ensure_ascii=False)},
        }
        for call in message.tool_calls
    ]


def finish_reason(result: PaCoReResult) -> str:
    return result.message.response_metadata.get("finish_reason") or (
        "tool_calls" if result.message.tool_calls else "stop"
    )


def usage(result: PaCoReResult) -> dict[str, Any]:
    rounds = [
        {
            "round": r.round_index,
            "k": r.k,
            "completion_tokens": r.completion_tokens,
            "prompt_tokens": sum(t.prompt_tokens for t in r.trajectories),
            "failed": len(r.failures),
        }
        for r in result.rounds
    ]
    prompt_tokens = sum(r["prompt_tokens"] for r in rounds)
    extension: dict[str, Any] = {"rounds": rounds, "ttc_approximate": result.ttc_approximate}
    if result.models:
        extension["models"] = result.models
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": result.ttc,
        "total_tokens": prompt_tokens + result.ttc,
        "pacore": extension,
    }


def completion_body(header: ReplyHeader, result: PaCoReResult) -> dict[str, Any]:
    """The whole ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": result.answer}
    if reasoning := answer_reasoning(result):
        message["reasoning_content"] = reasoning
    if tool_calls := openai_tool_calls(result.message):
        message["tool_calls"] = tool_calls
        message["content"] = result.answer or None
    return {
        **header.fields("chat.completion"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(result), "logprobs": None}],
        "usage": usage(result),
    }


def chunk_body(header: ReplyHeader, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice."""
    return {
        **header.fields("chat.completion.chunk"),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def usage_chunk_body(header: ReplyHeader, result: PaCoReResult) -> dict[str, Any]:
    """The last chunk of a stream that asked for ``stream_options.include_usage``: no choices, the usage."""
    return {**header.fields("chat.completion.chunk"), "choices": [], "usage": usage(result)}
