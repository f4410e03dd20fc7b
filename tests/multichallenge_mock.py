"""A loopback OpenAI-compatible mock for the MultiChallenge commands: replies are a function of the prompt,
every request is counted, and one conversation's fourth first-round request can be held until the server stops
(so a test can kill a run at a known point); and the data file those tests run on."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from pathlib import Path

from aiohttp import web

JUDGE_MARK = "<MODEL_RESPONSE>"  # the official judge prompt


class MockServer:
    """OpenAI-compatible chat completions on 127.0.0.1; replies are a function of the prompt."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []  # (kind, conversation key)
        self.hold: str | None = None  # conversation whose 4th first-round request never answers
        self.held = threading.Event()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0

    # ---- lifecycle
    def __enter__(self) -> MockServer:
        threading.Thread(target=self._serve, daemon=True).start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        # Release a held request and close connections before stopping the loop: no dangling tasks.
        self._loop.call_soon_threadsafe(self._release.set)
        done = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        done.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = runner = web.AppRunner(app, shutdown_timeout=0.5)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- handlers
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "mock", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        last = messages[-1]["content"]
        if JUDGE_MARK in messages[0]["content"]:
            kind, key = "judge", last.split("<CRITERIA>\n")[1].split("?")[0]
            content = json.dumps({"reasoning": "fine", "verdict": "YES" if "GOOD" in last else "NO"})
        else:
            key = messages[0]["content"]
            kind = "synthesis" if "Reference Responses:" in last else "round1"
            content = f"final answer for {key} GOOD" if kind == "synthesis" else f"draft for {key}"
        with self._lock:
            self.calls.append((kind, key))
            nth = sum(1 for c in self.calls if c == (kind, key))
        if kind == "round1" and key == self.hold and nth >= 4:
            self.held.set()
            await self._release.wait()  # not answered before the run is killed
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "mock",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
            }
        )

    def counts(self) -> Counter:
        with self._lock:
            return Counter(self.calls)


def write_data(path: Path, n: int) -> None:
    rows = []
    for i in range(n):
        rows.append(
            {
                "QUESTION_ID": f"q{i}",
                "AXIS": ["INFERENCE_MEMORY", "SELF_COHERENCE"][i % 2],
                "CONVERSATION": [
                    {"role": "user", "content": f"c{i}"},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": f"follow-up {i}"},
                ],
                "TARGET_QUESTION": f"t{i}?",
                "PASS_CRITERIA": "YES",
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
