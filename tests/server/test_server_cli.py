"""``pacore serve`` as a user starts it: in front of the serving emulator, called by the openai SDK."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import httpx
from openai import OpenAI
from waits import still_running, wait_until

from pacore_emulator import Emulator, EmulatorConfig

QUESTION = [{"role": "user", "content": "What is 17*23?"}]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serving(process: subprocess.Popen, url: str) -> bool:
    """Whether pacore serve answers ``url``; fails at once if it exited."""
    try:
        return still_running(process, "pacore serve") and httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_pacore_serve_in_front_of_the_emulator(tmp_path):
    log = tmp_path / "upstream.jsonl"
    port = free_port()
    config = EmulatorConfig(ttft=0.01, token_delay=0.0005, output_tokens=(20, 60), request_log=str(log))
    with Emulator(config) as emu:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pacore_graph.cli",
                "serve",
                "--base-url",
                emu.base_url,
                "--rounds",
                "3",
                "--port",
                str(port),
                "--api-key",
                "s3cret",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: serving(process, f"http://127.0.0.1:{port}/health"), 60, what="pacore serve answered")
            client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="s3cret")
            plain = client.chat.completions.create(model=emu.config.model, messages=QUESTION)
            chunks = list(
                client.chat.completions.create(
                    model=f"pacore-rounds-2/{emu.config.model}",
                    messages=QUESTION,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            stats = emu.stats()
        finally:
            process.send_signal(signal.SIGINT)
            try:
                assert process.wait(timeout=30) == 0
            except subprocess.TimeoutExpired:  # Ctrl-C did not stop it: fail, leaving no server behind
                process.kill()
                process.wait()
                raise
    bodies = [json.loads(line)["body"] for line in log.read_text().splitlines()]
    synthesis = ["Reference Responses:" in body["messages"][-1]["content"] for body in bodies]
    assert len(bodies) == (3 + 1) + (2 + 1) and synthesis.count(True) == 2  # [3] by default, [2] by model name
    assert plain.choices[0].message.content and "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert plain.usage.completion_tokens + chunks[-1].usage.completion_tokens == stats["tokens_out"]


def test_pacore_serve_says_in_one_line_when_the_upstream_is_down():
    run = subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", "serve", "--base-url", f"http://127.0.0.1:{free_port()}/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    error = run.stderr.strip()
    assert error.startswith("pacore: error: cannot reach the model server") and "\n" not in error
