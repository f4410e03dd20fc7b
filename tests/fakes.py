"""Deterministic test chat models: every reply is a function of the prompt (never of call order)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from pacore_graph.synthesis.prompt import message_text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class PromptFunctionChatModel(BaseChatModel):
    """Replies with ``reply(messages)``; records every prompt it saw."""

    reply: Callable[[list[BaseMessage]], AIMessage | str]
    seen: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "prompt-function"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        out = self.reply(messages)
        message = out if isinstance(out, AIMessage) else AIMessage(content=out)
        return ChatResult(generations=[ChatGeneration(message=message)])


def think_reply(messages: list[BaseMessage]) -> AIMessage:
    """<think> reasoning, then a conclusion naming a digest of the last message."""
    last = message_text(messages[-1])
    return AIMessage(
        content=f"<think>reasoning about {digest(last)}</think>answer-{digest(last)}",
        usage_metadata={"input_tokens": 10, "output_tokens": 7, "total_tokens": 17},
    )
