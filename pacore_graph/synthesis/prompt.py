"""The synthesis prompt (the paper's template, ``pacore_graph.config.DEFAULT_TEMPLATE``, by default) and the message
surgery of rounds >= 2.

PaCoRe-8B was trained on exactly the default text, rendered by jinja2 with default settings (which drop the
template's trailing newline), so the rendering must stay byte-identical to the reference rendering.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache

import jinja2
from langchain_core.messages import BaseMessage, HumanMessage

from pacore_graph.config import DEFAULT_TEMPLATE

_JINJA = jinja2.Environment()  # default settings, as jinja2.Template(text) has: the trailing newline dropped


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    return _JINJA.from_string(template)


def render_synthesis_prompt(original_prompt: str, references: Sequence[str], template: str = DEFAULT_TEMPLATE) -> str:
    """Render the template over the previous round's conclusions."""
    return _compile(template).render(original_prompt=original_prompt, ref_responses=list(references))


def message_text(message: BaseMessage) -> str:
    """Plain text of a message whose content may be a list of content blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text":  # LangChain validated the content: a string or a dict
            parts.append(block.get("text", ""))
    return "".join(parts)


def last_user_index(messages: Sequence[BaseMessage]) -> int:
    """Position of the last user message; PaCoRe needs one to wrap."""
    for position in range(len(messages) - 1, -1, -1):
        if isinstance(messages[position], HumanMessage):
            return position
    raise ValueError("PaCoRe needs at least one user (human) message in the input: none was found")


def synthesis_messages(
    messages: Sequence[BaseMessage], references: Sequence[str], template: str = DEFAULT_TEMPLATE
) -> list[BaseMessage]:
    """The caller's messages with only the last user message's content replaced by the template.

    System, assistant and tool messages, and earlier user turns, stay as they are (paper Appendix B):
    that is what lets PaCoRe wrap multi-turn chat and agents.
    """
    position = last_user_index(messages)
    original = messages[position]
    wrapped = original.model_copy(
        update={"content": render_synthesis_prompt(message_text(original), references, template)}
    )
    return [*messages[:position], wrapped, *messages[position + 1 :]]


def order_references(lengths: Sequence[int], seed: int, policy: str) -> list[int]:
    """Order in which trajectories appear as references, as positions into ``lengths``.

    ``length_shuffle`` is the reference pipeline's: a stable sort by the length of the raw response
    content, then ``random.Random(seed).shuffle`` over all K (failed ones count with length 0, as there);
    the caller drops unusable ones afterwards. ``index`` keeps trajectory order.
    """
    positions = list(range(len(lengths)))
    if policy == "index":
        return positions
    positions.sort(key=lambda position: lengths[position])
    random.Random(seed).shuffle(positions)
    return positions
