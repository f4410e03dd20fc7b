"""Text for a model or a log: cut long text to its head and tail; keep passwords in URLs out of messages."""

from __future__ import annotations

import re

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):[^/\s@]*@")


def cut_middle(text: str, head: int, tail: int, what: str | None = None) -> str:
    """``text`` itself when it has at most ``head + tail`` characters; else its first ``head`` and last
    ``tail`` characters around a marker line ``[... what ...]`` (default: how many characters were cut).

    The end of a long output (a test failure, a final answer) is usually what matters, so callers keep a
    tail; ``tail=0`` keeps the head only.
    """
    if len(text) <= head + tail:
        return text
    marker = what or f"{len(text) - head - tail} characters cut"
    return f"{text[:head]}\n[... {marker} ...]\n{text[len(text) - tail :] if tail else ''}"


def redact_credentials(text: str) -> str:
    """``text`` with the password of every URL's ``user:password@`` replaced by ``***``: a URL given with
    credentials (``--base-url http://user:pw@host/v1``) may appear in an error message or a log line."""
    return _URL_PASSWORD.sub(r"\1:***@", text)
