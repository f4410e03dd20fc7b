"""``pacore solve --output`` on real vLLM, as a user types it: the run, Ctrl-C in round 2 and the same command
again (round 1 is not bought twice), then once more (the answer read back, nothing sent).

The first run reaches vLLM through a gate that passes round 1's three requests and holds the rest, so the
Ctrl-C lands in round 2 however fast this machine is (a round-2 reply of a 135M model can take under a
second, and watching vLLM's metrics for it raced)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

from aiohttp import ClientSession, web
from mock_openai import LoopbackApp
from real_vllm import MODEL, REPLY_CAP
from waits import still_running, wait_until


def done_requests(vllm) -> float:
    """Requests vLLM finished with a reply (stop or length), not aborted ones."""
    found = vllm.metrics()
    return found.get("vllm:request_success_total{stop}", 0) + found.get("vllm:request_success_total{length}", 0)


class Gate(LoopbackApp):
    """A loopback HTTP proxy to vLLM that forwards the first ``passes`` chat requests and holds every later
    one until the client hangs up (``held`` counts them)."""

    def __init__(self, upstream: str, passes: int):
        super().__init__(handler_cancellation=True)  # a held request ends when its client hangs up
        self.upstream, self.passes = upstream.rstrip("/"), passes
        self.forwarded = self.held = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self.forwarded >= self.passes:
            self.held += 1
            await asyncio.Event().wait()  # until the client hangs up or the gate closes
        self.forwarded += 1
        body = await request.read()
        async with ClientSession() as session:
            async with session.post(
                f"{self.upstream}/chat/completions", data=body, headers={"Content-Type": "application/json"}
            ) as reply:
                return web.Response(body=await reply.read(), status=reply.status, content_type=reply.content_type)


def solve_command(base_url: str, out: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "pacore"),
        "solve",
        "Name three prime numbers and add them up.",
        "--base-url",
        base_url,
        "--model",
        MODEL,
        "--rounds",
        "3,3",
        "--max-tokens",
        str(REPLY_CAP),
        "--output",
        str(out),
    ]


def test_solve_output_resumes_after_ctrl_c_without_buying_round_one_again(vllm, tmp_path: Path):
    vllm.wait_idle()
    out = tmp_path / "run"
    start = done_requests(vllm)
    with Gate(vllm.base_url, passes=3) as gate:
        first = subprocess.Popen(
            solve_command(gate.base_url, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # round 1 answered, round 2 asked
        wait_until(lambda: still_running(first, "pacore solve") and gate.held > 0, 120, what="round 2 started")
        first.send_signal(signal.SIGINT)  # Ctrl-C while round 2 runs
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    vllm.wait_idle()
    assert done_requests(vllm) - start == 3

    command = solve_command(vllm.base_url, out)  # the same run, straight to vLLM
    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout.splitlines()[-1])
    assert summary["counts"]["done"] == 1 and summary["answer"] and second.stdout.startswith(summary["answer"])
    assert done_requests(vllm) - start == 3 + 3 + 1  # every finished trajectory bought once

    before = done_requests(vllm)
    third = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and third.stdout == second.stdout and "answered before" in third.stderr
    assert done_requests(vllm) == before
