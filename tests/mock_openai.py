"""A scripted OpenAI-compatible server on loopback that records every request body it receives.

Conformance tests need exact control (this reply for that prompt, a 500 for the first attempt of that
trajectory), which a benchmark emulator with fault *rates* does not give. ``handler(body, attempt)``
returns a reply dict (message fields), an ``int`` HTTP status to fail with, or ``bytes`` to send as a
(malformed) body with status 200. A reply with ``"delay": seconds`` is held that long first; a client that
hangs up meanwhile is counted in ``disconnected``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

Handler = Callable[[dict[str, Any], int], "dict[str, Any] | int"]


def prompt_key(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], sort_keys=True)


class MockOpenAIServer:
    """Run in a background thread; ``requests`` lists the JSON bodies in arrival order, ``keys`` their API keys,
    ``sessions`` their session keys (the ``X-Session-ID`` header vllm-router routes by)."""

    def __init__(self, handler: Handler, model: str = "mock-model"):
        self.handler = handler
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str | None] = []  # the bearer token of each request, None without one
        self.sessions: list[str | None] = []
        self.disconnected = 0
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.keys.append(request.headers.get("Authorization", "").removeprefix("Bearer ") or None)
            self.sessions.append(request.headers.get("X-Session-ID"))
            same_prompt = prompt_key(body)
            self._attempts[same_prompt] += 1
            attempt = self._attempts[same_prompt]
        reply = self.handler(body, attempt)
        if isinstance(reply, dict) and reply.get("delay"):
            if await self._client_left(request, reply["delay"]):
                with self._lock:
                    self.disconnected += 1
                return web.Response(status=499)
        if isinstance(reply, bytes):  # a garbage body with status 200
            return web.Response(body=reply, content_type="application/json")
        if isinstance(reply, int):
            return web.json_response({"error": {"message": f"scripted {reply}", "code": reply}}, status=reply)
        message = {"role": "assistant", "content": reply.get("content", "")}
        for field in ("reasoning_content", "reasoning", "tool_calls"):
            if field in reply:
                message[field] = reply[field]
        usage = reply.get("usage", {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16})
        if body.get("stream"):
            return await self._stream(request, message, reply.get("finish_reason", "stop"), usage)
        return web.json_response(
            {
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "model": body.get("model", self.model),
                "choices": [{"index": 0, "message": message, "finish_reason": reply.get("finish_reason", "stop")}],
                "usage": usage,
            }
        )

    async def _stream(self, request, message, finish_reason, usage) -> web.StreamResponse:
        """SSE as vLLM sends it: reasoning deltas, content deltas a few characters at a time, usage last."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict, finish: str | None = None, **extra) -> None:
            chunk = {"id": "c", "object": "chat.completion.chunk", "model": self.model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}  # fmt: skip
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant"})
        for field in ("reasoning_content", "reasoning", "content"):
            text = message.get(field) or ""
            for start in range(0, len(text), 3):
                await send({field: text[start : start + 3]})
        for position, call in enumerate(message.get("tool_calls") or ()):
            function = call["function"]
            await send({"tool_calls": [{"index": position, "id": call.get("id"), "type": "function",
                                        "function": {"name": function["name"], "arguments": ""}}]})  # fmt: skip
            await send({"tool_calls": [{"index": position, "function": {"arguments": function["arguments"]}}]})
        await send({}, finish_reason)
        await response.write(
            f"data: {json.dumps({'id': 'c', 'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()
        )
        await response.write_eof()
        return response

    @staticmethod
    async def _client_left(request: web.Request, seconds: float) -> bool:
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            if request.transport is None or request.transport.is_closing():
                return True
            await asyncio.sleep(0.02)
        return False

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    def __enter__(self) -> MockOpenAIServer:
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
