"""Cutting long text for a model or a log: keep its head and its tail, and say how much was cut between."""

from __future__ import annotations


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
