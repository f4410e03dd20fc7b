"""Token chunks of chosen chat-model runs, handed on as they arrive: the PaCoRe chat model's own stream.

:class:`RunTokens` hands on the chunks of the runs it is given (a caller's ear on its own call's run).
:class:`FinalRoundTokens`, attached to the callbacks of one PaCoRe run, picks the chat-model runs of the final
round as they start. Being a streaming handler (LangChain asks whether one with ``tap_output_aiter`` is attached),
it makes the final trajectory's model call stream token by token, as a LangGraph messages stream would; earlier
rounds ask for no streaming. Only the pieces of a message go on (text, reasoning, tool-call chunks): the final
call's own id, usage and metadata are not the answer's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk


class RunTokens(BaseCallbackHandler):
    """Hands ``send`` each token chunk (an AI message chunk) of the chat-model runs in ``runs``; ``sent`` counts."""

    run_inline = True  # called in order, on the run's own loop

    def __init__(self, send: Callable[[AIMessageChunk], None], runs: Iterable[UUID] = ()):
        self.send = send
        self.runs = set(runs)
        self.sent = 0

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        if run_id not in self.runs or not isinstance(chunk, ChatGenerationChunk):
            return
        message = chunk.message
        if isinstance(message, AIMessageChunk) and (piece := self.piece(message)) is not None:
            self.sent += 1
            self.send(piece)

    def piece(self, message: AIMessageChunk) -> AIMessageChunk | None:
        """What goes on of a chunk (None: nothing): the whole chunk."""
        return message


class FinalRoundTokens(RunTokens):
    """Sends each token chunk of the chat-model runs of round ``final_round`` to ``send``: its pieces only."""

    def __init__(self, final_round: int, send: Callable[[AIMessageChunk], None]):
        super().__init__(send)
        self.final_round = final_round

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, metadata: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if metadata and metadata.get("pacore_round") == self.final_round:
            self.runs.add(run_id)

    def piece(self, message: AIMessageChunk) -> AIMessageChunk | None:
        if not (message.content or message.tool_call_chunks or message.additional_kwargs):
            return None
        return AIMessageChunk(
            content=message.content,
            additional_kwargs=message.additional_kwargs,
            tool_call_chunks=message.tool_call_chunks,
        )

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[Any]) -> Iterator[Any]:
        return output
