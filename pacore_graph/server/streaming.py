"""``"stream": true``: the final round token by token; earlier rounds' progress as SSE comments.

Why comments: a line that starts with ``:`` is part of the SSE format and every conformant client (the
openai SDK, litellm, LangChain's ChatOpenAI, browsers' EventSource) skips it, so a strict OpenAI client
sees an ordinary stream, while anyone reading the raw stream (``curl -N``) sees the rounds go by::

    : pacore {"event": "round_started", "round": 0, "k": 4, "rounds": 2}
    : pacore {"event": "trajectory_finished", "round": 0, "index": 2, "completion_tokens": 812, ...}
    : pacore {"event": "round_finished", "round": 0, "k": 4, "completion_tokens": 3301, "failed": 0}
    data: {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "The"}, ...}], ...}
    ...
    data: {"object": "chat.completion.chunk", "choices": [{"delta": {}, "finish_reason": "stop"}], ...}
    data: [DONE]

The final trajectory's tool calls come whole, in one delta after its text. Without a reasoning parser
upstream a ``<think>`` block in the text streams as text (the non-streamed reply keeps only the
conclusion). A failure mid-run ends the stream with an OpenAI error event (``data: {"error": ...}``),
which the openai SDK raises as ``APIError``; so does a final trajectory that is retried after some of
its tokens were already sent (its text could not be taken back).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage

from pacore_graph.graph.runner import START_INPUT, PaCoReRunner, build_result
from pacore_graph.models.sse import reasoning_of
from pacore_graph.records import PaCoReResult
from pacore_graph.server.disconnect import cancel_and_wait
from pacore_graph.server.errors import RequestError, failure_error, log
from pacore_graph.server.replies import (
    ReplyHeader,
    chunk_body,
    finish_reason,
    openai_tool_calls,
    usage_chunk_body,
)
from pacore_graph.server.request import PlannedCall
from pacore_graph.synthesis.prompt import message_text

KEEPALIVE_SECONDS = 15.0  # a comment line this often keeps idle proxies from closing a long first round
DONE = b"data: [DONE]\n\n"


async def run_streaming(
    runner: PaCoReRunner,
    messages: list[BaseMessage],
    on_token: Callable[[AIMessageChunk], None],
    on_event: Callable[[dict[str, Any]], None],
) -> PaCoReResult:
    """:meth:`PaCoReRunner.arun`, with the final round's tokens handed to ``on_token`` as they arrive.

    The tokens come from LangGraph's ``messages`` stream mode: earlier rounds are tagged nostream, so
    only the final round's chat-model run streams, and only while someone listens like this.
    """
    context = runner.context(messages, trace=True, on_event=on_event)
    final_round = len(runner.config.schedule) - 1
    final: Mapping[str, Any] | None = None  # the last values part: the final state and any interrupts
    with runner.running(context):
        async for part in runner.graph.astream(
            START_INPUT,
            runner.run_config(None, context, sync=False),
            context=context,
            stream_mode=["messages", "values"],
            version="v2",
        ):
            if part["type"] == "values":
                final = part
            elif part["type"] == "messages":
                chunk, metadata = part["data"]
                if isinstance(chunk, AIMessageChunk) and metadata.get("pacore_round") == final_round:
                    on_token(chunk)
    assert final is not None
    return build_result(final["data"], context.trace, final["interrupts"])


def sse_data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def sse_comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


class _FinalText:
    """Which chat-model run's tokens are being sent, and whether any text went out."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.sent = False  # any delta of the current run
        self.content_sent = False

    def delta(self, chunk: AIMessageChunk) -> dict[str, Any]:
        if self.run_id is None or not self.sent:
            self.run_id = chunk.id
        elif chunk.id != self.run_id:
            raise RequestError(
                502,
                "the final trajectory failed after part of its text was streamed and was retried; the "
                "partial text above is void: send the request again",
                type="upstream_error",
                code="stream_restarted",
            )
        delta: dict[str, Any] = {}
        if text := message_text(chunk):
            delta["content"] = text
            self.content_sent = True
        if reasoning := reasoning_of(chunk.additional_kwargs):
            delta["reasoning_content"] = reasoning
        self.sent = self.sent or bool(delta)
        return delta


async def sse_stream(
    runner: PaCoReRunner, call: PlannedCall, header: ReplyHeader, late: RequestError, timeout: float | None = None
) -> AsyncIterator[bytes]:
    """The response body of a streamed request. Closing it (the client went away) cancels the run, and so
    closes its requests upstream; so does ``timeout`` passing, after which the stream ends with ``late``."""
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def produce() -> None:
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                result = await run_streaming(
                    runner,
                    call.messages,
                    lambda chunk: queue.put_nowait(("token", chunk)),
                    lambda event: queue.put_nowait(("progress", event)),
                )
            queue.put_nowait(("done", result))
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                log.warning("a streamed request ran past the request timeout (%g s); its run was cancelled", timeout)
                queue.put_nowait(("late", late))
            else:
                queue.put_nowait(("error", exc))

    async def keep_alive() -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            queue.put_nowait(("ping", None))

    tasks = [asyncio.ensure_future(produce()), asyncio.ensure_future(keep_alive())]
    final = _FinalText()
    try:
        yield sse_data(chunk_body(header, {"role": "assistant", "content": ""}))
        while True:
            kind, item = await queue.get()
            if kind == "token":
                try:
                    delta = final.delta(item)
                except RequestError as exc:
                    yield sse_data(exc.body())
                    return
                if delta:
                    yield sse_data(chunk_body(header, delta))
            elif kind == "progress":
                yield sse_comment("pacore " + json.dumps(item))
            elif kind == "ping":
                yield sse_comment("keep-alive")
            elif kind == "error":
                yield sse_data(failure_error(item).body())
                return
            elif kind == "late":
                yield sse_data(item.body())
                return
            else:
                for part in closing_chunks(header, item, call.include_usage, text_sent=final.content_sent):
                    yield part
                return
    finally:
        await cancel_and_wait(*tasks)


def closing_chunks(header: ReplyHeader, result: PaCoReResult, include_usage: bool, *, text_sent: bool) -> list[bytes]:
    """What follows the last token: the answer if nothing streamed, tool calls, finish reason, usage, [DONE]."""
    parts = []
    if not text_sent and result.answer:
        parts.append(sse_data(chunk_body(header, {"content": result.answer})))
    if tool_calls := openai_tool_calls(result.message):
        indexed = [{"index": position, **call} for position, call in enumerate(tool_calls)]
        parts.append(sse_data(chunk_body(header, {"tool_calls": indexed})))
    parts.append(sse_data(chunk_body(header, {}, finish_reason(result))))
    if include_usage:
        parts.append(sse_data(usage_chunk_body(header, result)))
    parts.append(DONE)
    return parts
