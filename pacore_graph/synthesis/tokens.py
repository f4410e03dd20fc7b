"""Token accounting for effective test-time compute.

Server-reported usage is exact and always comes first. Without it we count with tiktoken; tiktoken
downloads its encoding files on first use, so offline (no cached file) we fall back to an estimate of
about four characters a token, and mark the count as approximate.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

_ENCODING = "o200k_base"
_lock = threading.Lock()
_unavailable = False


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding(_ENCODING)


def _tiktoken_count(text: str) -> int | None:
    global _unavailable
    if _unavailable:
        return None
    try:
        with _lock:
            encoding = _encoding()
    except Exception:  # offline: the encoding file cannot be fetched; do not try again this process
        _unavailable = True
        return None
    return len(encoding.encode(text, disallowed_special=()))


def count_tokens(text: str) -> tuple[int, bool]:
    """(tokens, approximate) for text whose usage the server did not report."""
    if not text:
        return 0, False
    exact = _tiktoken_count(text)
    if exact is not None:
        return exact, False
    return max(1, round(len(text) / 4)), True


def completion_tokens(reported: int | None, content: str, reasoning: str | None) -> tuple[int, bool]:
    """Completion tokens of one trajectory, reasoning included: reported usage, else a count."""
    if reported is not None:
        return int(reported), False
    return count_tokens((reasoning or "") + content)
