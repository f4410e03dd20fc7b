"""A scripted OpenAI-compatible server on loopback that records every request body it receives.

Conformance tests need exact control (this reply for that prompt, a 500 for the first attempt of that
trajectory), which a benchmark emulator with fault *rates* does not give. ``handler(body, attempt)``
returns a reply dict (message fields), an ``int`` HTTP status to fail with (or a ``(status, message)``
pair: vLLM's error body with that message; or ``(status, message, headers)``, e.g. a 429 with Retry-After),
or ``bytes`` to send as a (malformed) body with status 200.
A reply with ``"delay": seconds`` is held that long first; a client that
hangs up meanwhile is counted in ``disconnected``.

Requests are checked as vLLM checks them before the handler sees them: a ``tool_choice`` other than "auto",
"none", "required" or a named tool, or naming a tool that is not offered, is a 400. Replies honour ``stop``
(the text ends before the first stop sequence) and stream as vLLM streams: tool calls with their name once
and arguments in pieces, usage only when ``stream_options.include_usage`` asks for it. ``llama_cpp=True``
streams tool calls as llama.cpp does, repeating the id and name in every delta of a call.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, Self

from aiohttp import web

Handler = Callable[[dict[str, Any], int], "dict[str, Any] | int | tuple[int, str] | bytes"]


def prompt_key(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], sort_keys=True)


class LoopbackApp:
    """An aiohttp application on a loopback port, served by a loop in a background thread while the ``with``
    block lasts. Subclasses add their routes in :meth:`routes`. ``handler_cancellation``: a handler is
    cancelled when its client hangs up (aiohttp's option)."""

    def __init__(self, *, handler_cancellation: bool = False) -> None:
        self.handler_cancellation = handler_cancellation
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=self.handler_cancellation)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    def __enter__(self) -> Self:
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


class MockOpenAIServer(LoopbackApp):
    """Run in a background thread; ``requests`` lists the JSON bodies in arrival order, ``keys`` their API keys,
    ``sessions`` their session keys (the ``X-Session-ID`` header vllm-router routes by)."""

    def __init__(self, handler: Handler, model: str = "mock-model", *, llama_cpp: bool = False):
        self.handler = handler
        self.model = model
        self.llama_cpp = llama_cpp
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str | None] = []  # the bearer token of each request, None without one
        self.sessions: list[str | None] = []
        self.disconnected = 0
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()
        super().__init__()

    def open_connections(self) -> int:
        """Client connections the server still holds. A connection counts until the client closed it and the
        handler of its last request has finished, so zero means every request written to the server has been
        recorded and nothing is in flight: the settled state "nothing more is sent" checks wait for."""

        async def count() -> int:
            assert self._runner is not None and self._runner.server is not None
            return len(self._runner.server.connections)

        return asyncio.run_coroutine_threadsafe(count(), self._loop).result(timeout=10)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.keys.append(request.headers.get("Authorization", "").removeprefix("Bearer ") or None)
            self.sessions.append(request.headers.get("X-Session-ID"))
            same_prompt = prompt_key(body)
            self._attempts[same_prompt] += 1
            attempt = self._attempts[same_prompt]
        refused = refusal(body)
        reply = (400, refused) if refused else self.handler(body, attempt)
        if isinstance(reply, dict) and reply.get("delay"):
            if await self._client_left(request, reply["delay"]):
                with self._lock:
                    self.disconnected += 1
                return web.Response(status=499)
        if isinstance(reply, bytes):  # a garbage body with status 200
            return web.Response(body=reply, content_type="application/json")
        if isinstance(reply, int):
            return web.json_response({"error": {"message": f"scripted {reply}", "code": reply}}, status=reply)
        if isinstance(reply, tuple):
            status, text, *headers = reply
            error = {"object": "error", "message": text, "type": "BadRequestError", "param": None, "code": status}
            return web.json_response(error, status=status, headers=headers[0] if headers else None)
        message = {"role": "assistant", "content": stopped(reply.get("content", ""), body.get("stop"))}
        for field in ("reasoning_content", "reasoning", "tool_calls"):
            if field in reply:
                message[field] = reply[field]
        usage = reply.get("usage", {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16})
        if body.get("stream"):
            usage = usage if (body.get("stream_options") or {}).get("include_usage") else None
            model = body.get("model", self.model)
            return await self._stream(request, message, reply.get("finish_reason", "stop"), usage, model)
        return web.json_response(
            {
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "model": body.get("model", self.model),
                "choices": [{"index": 0, "message": message, "finish_reason": reply.get("finish_reason", "stop")}],
                "usage": usage,
            }
        )

    async def _stream(self, request, message, finish_reason, usage, model) -> web.StreamResponse:
        """SSE as vLLM sends it: reasoning deltas, content deltas a few characters at a time, usage last."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict, finish: str | None = None, **extra) -> None:
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant"})
        for field in ("reasoning_content", "reasoning", "content"):
            text = message.get(field) or ""
            for start in range(0, len(text), 3):
                await send({field: text[start : start + 3]})
        for position, call in enumerate(message.get("tool_calls") or ()):
            function, arguments = call["function"], call["function"]["arguments"]
            head = {"index": position, "id": call.get("id"), "type": "function"}
            await send({"tool_calls": [{**head, "function": {"name": function["name"], "arguments": ""}}]})
            for start in range(0, len(arguments), 4):
                piece = {"arguments": arguments[start : start + 4]}
                if self.llama_cpp:  # llama.cpp repeats the id and the whole name in every delta
                    await send({"tool_calls": [{**head, "function": {"name": function["name"], **piece}}]})
                else:
                    await send({"tool_calls": [{"index": position, "function": piece}]})
        await send({}, finish_reason)
        if usage is not None:
            await response.write(f"data: {json.dumps({'id': 'c', 'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
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

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)


def refusal(body: dict[str, Any]) -> str | None:
    """vLLM's 400 for a request it refuses before generating (its tool_choice checks), else None."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    offered = [tool.get("function", {}).get("name") for tool in body.get("tools") or ()]
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            return f"Invalid value for `tool_choice`: {choice!r}"
        if choice == "required" and not offered:
            return "When using `tool_choice`, `tools` must be set."
        return None
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if name not in offered:
        return f"The tool specified in `tool_choice` does not match any of the specified `tools`: {name!r}"
    return None


def stopped(text: str, stop: list[str] | str | None) -> str:
    """The text up to its first stop sequence (excluded), as vLLM returns it."""
    for sequence in [stop] if isinstance(stop, str) else stop or ():
        if sequence and sequence in text:
            text = text[: text.index(sequence)]
    return text
