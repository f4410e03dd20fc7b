"""A session key per prompt, so that vllm-router keeps the requests that share a prompt on one replica.

vllm-router (0.1.17) routes a chat completion without reading its messages: ``cache_aware`` sees an empty
text and falls back to the least loaded replica, while ``consistent_hash`` and ``sticky_least_loaded`` follow
a session key (``session_params.session_id`` or an ``X-Session-ID`` header) and, without one, send every
request to the same replica. The key here is a hash of the messages up to the last user message: what the
K trajectories of a PaCoRe round share (so they meet the prefix cache on one replica), and what an agent
episode's later turns extend (so they find their prefix where it was computed).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pacore_graph.extend import OpenAICompatibleChatModel


def session_key(messages: list[dict[str, Any]]) -> str:
    """Hash of the messages up to and including the last user message (all of them if none is a user's)."""
    last_user = max((i for i, message in enumerate(messages) if message.get("role") == "user"), default=-1)
    shared = messages[: last_user + 1] if last_user >= 0 else messages
    return hashlib.sha1(json.dumps(shared, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


class SessionKeyedChatModel(OpenAICompatibleChatModel):
    """The project's lean client, each request carrying :func:`session_key` as ``session_params.session_id``."""

    def payload(self, messages: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
        body = super().payload(messages, **overrides)
        body["session_params"] = {"session_id": session_key(messages)}
        return body
