"""Keep the synthesis prompt inside the model's context window: the documented reference-capping policy.

1. ``reference_token_cap``: every reference longer than the cap keeps its head and tail (the final
   answer is usually at the end) around a marker saying how much was cut.
2. ``context_window``: the synthesis prompt is measured before the call. The budget is the window minus
   ``max_tokens`` (or a quarter of the window when generation is uncapped). If the references do not
   fit, all are capped to an equal share; if a share would fall under ``MIN_SHARE`` tokens, the longest
   references are left out (one at least is kept) until the rest fit.
Token counts use the project's counter (exact with tiktoken, else about 4 characters a token).

Where the window comes from: ``PaCoReConfig.context_window``, else the context the model's server reported
(:func:`pacore_graph.models.preflight.with_model_context`: the project's client of a llama.cpp server, the embedded
model included, carries it as ``profile["max_input_tokens"]``).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from pacore_graph.config import PaCoReConfig
from pacore_graph.synthesis.prompt import last_user_index, message_text, render_synthesis_prompt
from pacore_graph.synthesis.tokens import count_tokens

MIN_SHARE = 256
MESSAGE_OVERHEAD = 8  # role markers of a chat template, per message


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


def cap_text(text: str, max_tokens: int) -> str:
    """Keep the head and the tail of ``text`` within about ``max_tokens`` tokens."""
    tokens, _ = count_tokens(text)
    if tokens <= max_tokens:
        return text
    what = f"about {tokens - max_tokens} tokens cut to fit the context"
    room = max(1, max_tokens - count_tokens(f"\n[... {what} ...]\n")[0])  # the marker counts against the cap too
    keep_chars = max(2, room * len(text) // tokens)
    return cut_middle(text, keep_chars // 3, keep_chars - keep_chars // 3, what)


def fit_references(
    references: Sequence[str], messages: Sequence[BaseMessage], config: PaCoReConfig, template: str | None = None
) -> list[str]:
    """The references, capped so that the prompt ``template`` renders (default ``config.template``) fits."""
    references = list(references)
    if config.reference_token_cap:
        references = [cap_text(reference, config.reference_token_cap) for reference in references]
    if not config.context_window:
        return references
    reserve = config.max_tokens or config.context_window // 4
    budget = config.context_window - reserve
    position = last_user_index(messages)
    others = sum(count_tokens(message_text(m))[0] + MESSAGE_OVERHEAD for i, m in enumerate(messages) if i != position)
    empty = render_synthesis_prompt(message_text(messages[position]), [], template or config.template)
    base = others + count_tokens(empty)[0]
    available = budget - base
    sizes = [count_tokens(reference)[0] + MESSAGE_OVERHEAD for reference in references]
    if sum(sizes) <= available:
        return references
    kept = list(range(len(references)))
    while len(kept) > 1 and available // len(kept) < MIN_SHARE:
        kept.remove(max(kept, key=lambda i: sizes[i]))
    share = max(1, available // len(kept) - MESSAGE_OVERHEAD)
    return [cap_text(references[i], share) for i in kept]
