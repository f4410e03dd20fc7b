"""langgraph.json: `langgraph dev` serves the PaCoRe chat graph in LangGraph's own server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pacore_graph.models.embedded import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.embedded


def _post(url: str, payload: dict, timeout: float) -> dict:
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def test_langgraph_dev_serves_the_pacore_graph_on_a_thread_for_two_turns(tmp_path):
    """The server checkpoints each thread (``configurable`` included): PaCoRe must put nothing unpicklable there."""
    cli = shutil.which("langgraph", path=str(Path(sys.executable).parent))
    assert cli, "langgraph-cli[inmem] is part of the dev extra"
    # The repo's own langgraph.json, with paths made absolute so the server's scratch state stays in tmp_path.
    config = json.loads((ROOT / "langgraph.json").read_text())
    config["dependencies"] = [str(ROOT)]
    config["graphs"] = {name: str(ROOT / spec) for name, spec in config["graphs"].items()}
    config.pop("env", None)
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
    env.update(PACORE_ROUNDS="2", PACORE_MAX_TOKENS="48")
    process = subprocess.Popen(
        [cli, "dev", "--config", str(tmp_path / "langgraph.json"), "--no-browser", "--no-reload",
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path, env=env, stdout=(tmp_path / "server.log").open("w"), stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a kill reaches whatever it started
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ok", timeout=2)
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "langgraph dev did not start"
                time.sleep(1)
        base = f"http://127.0.0.1:{port}"
        thread = _post(f"{base}/threads", {}, timeout=30)["thread_id"]
        turns = []
        for question in ("Say hi.", "Now say bye."):
            turn = {"assistant_id": "pacore_chat", "input": {"messages": [{"role": "user", "content": question}]}}
            turns.append(_post(f"{base}/threads/{thread}/runs/wait", turn, timeout=600))
        state = json.load(urllib.request.urlopen(f"{base}/threads/{thread}/state", timeout=30))
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # SIGTERM did not stop it: fail, leaving no server behind
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    log = (tmp_path / "server.log").read_text()[-3000:]
    for out in turns:
        assert "__error__" not in out, (out, log)
    messages = state["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "human", "ai"], (messages, log)  # two turns, one thread
    for answer in (messages[1], messages[3]):
        assert answer["content"].strip()
        assert [r["k"] for r in answer["response_metadata"]["pacore"]["rounds"]] == [2, 1]
    assert "pickle" not in log.lower()
