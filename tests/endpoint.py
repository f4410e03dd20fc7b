"""``pacore serve``'s app in front of a scripted upstream, both on loopback, for the endpoint tests.

The upstream (:class:`MockOpenAIServer`) answers as a function of the prompt: a first-round trajectory
gets a draft, a synthesis request (its last user message holds the PaCoRe template) the final answer,
and each reply's completion tokens depend on the prompt, so sums over the request log are checkable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mock_openai import Handler, MockOpenAIServer

from pacore_graph import PaCoReConfig, chat_model
from pacore_graph.server import BackgroundServer, ServerLimits, create_app

TEMPLATE_MARK = "Reference Responses:"
FINAL_ANSWER = "The answer is 391."


def last_user_text(body: dict[str, Any]) -> str:
    user = [m for m in body["messages"] if m["role"] == "user"][-1]
    content = user["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def is_synthesis(body: dict[str, Any]) -> bool:
    return TEMPLATE_MARK in last_user_text(body)


def completion_tokens(body: dict[str, Any]) -> int:
    """What the scripted upstream reports for a request: a function of the prompt."""
    return 20 + len(json.dumps(body["messages"])) % 17 + (100 if is_synthesis(body) else 0)


def scripted(body: dict[str, Any], attempt: int) -> dict[str, Any]:
    """Drafts that differ by prompt in round 1, the final answer (with reasoning) when synthesising."""
    usage = {"prompt_tokens": 50, "completion_tokens": completion_tokens(body), "total_tokens": 0}
    if is_synthesis(body):
        return {"content": FINAL_ANSWER, "reasoning_content": "17*23 = 391, checked twice.", "usage": usage}
    return {"content": f"Draft: 17*23 is 391 (seen {len(body['messages'])} messages).",
            "reasoning_content": "multiply", "usage": usage}  # fmt: skip


def upstream_tokens(requests: list[dict[str, Any]]) -> int:
    return sum(completion_tokens(body) for body in requests)


@contextmanager
def endpoint(
    handler: Handler = scripted, *, rounds: list[int] | None = None, api_key: str | None = None,
    limits: ServerLimits | None = None, **settings: Any,
) -> Iterator[tuple[MockOpenAIServer, BackgroundServer]]:  # fmt: skip
    """(upstream, endpoint); the endpoint's default schedule is ``rounds`` ([2] unless given)."""
    with MockOpenAIServer(handler) as upstream:
        chat = chat_model(base_url=upstream.base_url, model=upstream.model)
        config = PaCoReConfig(rounds=[2] if rounds is None else rounds, **settings)
        with BackgroundServer(create_app(chat, config, api_key=api_key, limits=limits)) as server:
            yield upstream, server
