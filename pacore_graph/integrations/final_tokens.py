"""The final round's tokens, handed to the PaCoRe chat model's own stream as they arrive.

Attached to the callbacks of one PaCoRe run. Being a streaming handler (LangChain asks whether one with
``tap_output_aiter`` is attached), it makes the final trajectory's model call stream token by token, as a
LangGraph messages stream would; earlier rounds ask for no streaming. Only the pieces of a message go on
(text, reasoning, tool-call chunks): the final call's own id, usage and metadata are not the answer's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk


class FinalRoundTokens(BaseCallbackHandler):
    """Sends each token chunk of the chat-model runs of round ``final_round`` to ``send``."""

    run_inline = True  # called in order, on the run's own loop

    def __init__(self, final_round: int, send: Callable[[AIMessageChunk], None]):
        self.final_round = final_round
        self.send = send
        self.sent = 0
        self._runs: set[UUID] = set()

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, metadata: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if metadata and metadata.get("pacore_round") == self.final_round:
            self._runs.add(run_id)

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        if run_id not in self._runs or not isinstance(chunk, ChatGenerationChunk):
            return
        message = chunk.message
        if not isinstance(message, AIMessageChunk):  # a chat model's tokens: AI message chunks
            return
        if not (message.content or message.tool_call_chunks or message.additional_kwargs):
            return
        self.sent += 1
        self.send(
            AIMessageChunk(
                content=message.content,
                additional_kwargs=message.additional_kwargs,
                tool_call_chunks=message.tool_call_chunks,
            )
        )

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[Any]) -> Iterator[Any]:
        return output
