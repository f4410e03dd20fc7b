"""The session key each request carries, so that vllm-router sends the requests that share a prefix to one replica.

Past one GPU server, replicas sit behind vllm-router (``pacore serve-vllm --replicas N``). vllm-router
(0.1.17) routes a chat completion without reading its messages: ``sticky_least_loaded`` and ``consistent_hash``
follow a session key (an ``X-Session-ID`` header, the one this client sends; vLLM would log an unknown body
field) and send every request without one to the same replica. The key names what a request's prompt shares
with its siblings:

- a single problem (one user turn): the messages up to and including that turn, which the K trajectories of
  a round send alike, so the round's prompt is prefilled once;
- a conversation (an earlier user turn): the history before the last user turn, which every round of PaCoRe
  keeps (only the last user turn becomes the synthesis prompt), so later rounds find it cached;
- an agent episode: the messages up to its task, which every later step extends.

A short prompt (under :data:`SHORT_PROMPT_CHARS`) gets a fresh key per request instead: prefilling it again
on another replica costs next to nothing, while one key would put a whole round's decoding on one replica (a
problem's round 1 of 32 trajectories on one GPU, the others idle, when a chat bot has one problem in flight).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

SESSION_HEADER = "X-Session-ID"
EDGE = 1024  # characters from each end of a long message that stand for it in the key
SHORT_PROMPT_CHARS = 4096  # about a thousand tokens: shorter prompts spread over replicas


def session_key(messages: Sequence[dict[str, Any]]) -> str:
    """The request's key: its prefix's (:func:`prefix_key`), or for a short prompt a fresh one."""
    return prefix_key(messages) or fresh_key()


def fresh_key() -> str:
    """A key no other request has: sticky_least_loaded places it on the replica holding the fewest sessions."""
    return os.urandom(8).hex()  # as random as uuid4().hex[:16], a tenth of its cost


def prefix_key(messages: Sequence[dict[str, Any]]) -> str | None:
    """A short hash of the prefix the request shares (above), from OpenAI-style message dicts; None for a
    prompt under :data:`SHORT_PROMPT_CHARS`, which is not worth keeping on one replica.

    A long message counts by its length and its first and last :data:`EDGE` characters, so that a 65k-token
    synthesis prompt costs microseconds, not a millisecond; prompts alike in all three would only share a
    replica.
    """
    if _prompt_chars(messages) < SHORT_PROMPT_CHARS:
        return None
    users = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    if len(users) > 1:
        shared = messages[: users[-1]]
    elif users:
        shared = messages[: users[0] + 1]
    else:
        shared = messages
    named = [_named(message) for message in shared]
    text = json.dumps(named, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _named(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and len(content) > 2 * EDGE:
        return {**message, "content": [len(content), content[:EDGE], content[-EDGE:]]}
    return message


def _prompt_chars(messages: Sequence[dict[str, Any]]) -> int:
    """The prompt's length in characters: text contents and tool-call arguments (what dominates a prompt)."""
    size = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            size += len(content)
        elif isinstance(content, list):
            size += sum(len(part.get("text") or "") for part in content if isinstance(part, dict))
        for call in message.get("tool_calls") or ():
            size += len(str((call.get("function") or {}).get("arguments") or ""))
    return size
