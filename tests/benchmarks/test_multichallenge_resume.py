"""Kill a MultiChallenge run with SIGKILL and start it again: nothing finished is asked for again.

The CLI runs in a subprocess against a loopback OpenAI-compatible mock that counts every request and
can hold one trajectory forever, so the kill lands at a known point: three conversations written, the
fourth in its first round with three of four trajectories finished and saved in its checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from pacore_benchmarks.multichallenge.runner import problem_id
from pacore_benchmarks.perf.faults import saved_trajectories

REPO = Path(__file__).resolve().parents[1]
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


def cli_command(data: Path, output: Path, url: str) -> list[str]:
    return [
        sys.executable, "-m", "pacore_benchmarks.multichallenge.cli",
        "--data", str(data), "--base-url", url, "--rounds", "4", "--workers", "4",
        "--max-tokens", "32", "--output", str(output),
    ]  # fmt: skip


def result_rows(output: Path) -> list[dict]:
    path = output / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def saved_trajectories_of(output: Path) -> int:
    """Trajectories the checkpoints hold of the conversations without a row (LangGraph's saved writes)."""
    written = {problem_id(row["question_id"], row["sample"]) for row in result_rows(output)}
    return asyncio.run(saved_trajectories(output, written))


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(300)
def test_sigkill_then_rerun_redoes_nothing_finished(tmp_path):
    data, output = tmp_path / "data.jsonl", tmp_path / "out"
    write_data(data, 4)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    with MockServer() as server:
        server.hold = "c3"
        log = (tmp_path / "run1.log").open("wb")
        proc = subprocess.Popen(cli_command(data, output, server.url), cwd=REPO, env=env, stdout=log, stderr=log)
        try:
            wait_for(lambda: server.held.is_set() and len(result_rows(output)) == 3, 120, "3 rows and a held call")
            # the kill lands once the three finished trajectories of c3 are in its checkpoint
            wait_for(lambda: saved_trajectories_of(output) == 3, 60, "c3's three finished trajectories saved")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        first = server.counts()
        assert {r["question_id"] for r in result_rows(output)} == {"q0", "q1", "q2"}
        assert first[("round1", "c3")] == 4 and first[("synthesis", "c3")] == 0

        server.hold = None
        second = subprocess.run(cli_command(data, output, server.url), cwd=REPO, env=env, capture_output=True)
        assert second.returncode == 0, second.stdout.decode() + second.stderr.decode()
        after_second = server.counts()
        new = after_second - first

        # A third run finds everything done: no request at all.
        third = subprocess.run(cli_command(data, output, server.url), cwd=REPO, env=env, capture_output=True)
        assert third.returncode == 0, third.stderr.decode()
        assert server.counts() == after_second
        assert b"4 done, 0 to run" in third.stdout

    # Finished conversations: not one new request. In-flight conversation: only its unfinished trajectory.
    assert all(key in ("c3", "t3") for _, key in new.elements()), new
    assert new[("round1", "c3")] == 1, new
    assert new[("synthesis", "c3")] == 1 and new[("judge", "t3")] == 1, new
    rows = result_rows(output)
    assert sorted(r["question_id"] for r in rows) == ["q0", "q1", "q2", "q3"]  # no duplicates, none lost
    q3 = next(r for r in rows if r["question_id"] == "q3")
    assert [len(r["trajectories"]) for r in q3["rounds"]] == [4, 1] and q3["passed"]
