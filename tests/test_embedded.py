"""Integration with the real embedded model: SmolLM2-135M behind llama-cpp-python's server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph

from pacore_graph import PaCoReConfig, PaCoReNode, asolve, chat_model
from pacore_graph.models.embedded import free_port

pytestmark = pytest.mark.embedded


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OPENAI_BASE_URL", None)
    return env


def test_pacore_solve_runs_on_the_embedded_model_with_no_server_given(tmp_path):
    output = tmp_path / "run"
    command = [sys.executable, "-m", "pacore_graph.cli", "solve", "What is 17*23?", "--rounds", "2",
               "--max-tokens", "96", "--output", str(output)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_clean_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "effective TTC" in done.stderr and "final round" in done.stderr
    (summary,) = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert [r["k"] for r in summary["rounds"]] == [2, 1]
    assert summary["ttc"] == sum(t["completion_tokens"] for r in summary["rounds"] for t in r["trajectories"])
    assert summary["ttc"] > 0 and not summary["ttc_approximate"]  # llama.cpp reports usage
    assert summary["answer"] == done.stdout.strip()
    # The same command again reads the answer back: no server is started, nothing is spent.
    again = subprocess.run(command, capture_output=True, text=True, timeout=60, env=_clean_env())
    assert again.returncode == 0 and again.stdout == done.stdout
    assert "answered before" in again.stderr and "final round" not in again.stderr


async def test_node_in_a_multi_turn_graph_on_the_embedded_model(embedded_server):
    model = chat_model(embedded_server.base_url)
    builder = StateGraph(MessagesState)
    builder.add_node("pacore", PaCoReNode(model, PaCoReConfig(rounds=[2], max_tokens=64)))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    graph = builder.compile()
    conversation = [("system", "You answer briefly."), ("user", "Name a colour."), ("assistant", "Blue."),
                    ("user", "Name a fruit.")]  # fmt: skip
    out = await graph.ainvoke({"messages": conversation})
    await model.aclose()
    answer = out["messages"][-1]
    assert len(out["messages"]) == 5 and answer.content.strip()
    assert answer.response_metadata["pacore"]["ttc"] > 0


async def test_streaming_against_the_embedded_server(embedded_server):
    model = chat_model(embedded_server.base_url, max_tokens=24)
    result = await asolve(model, "Say hello.", PaCoReConfig(rounds=[1], max_tokens=24, stream=True))
    await model.aclose()
    assert result.answer.strip() and result.ttc > 0


def test_serve_local_serves_and_stops():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "pacore_graph.cli", "serve-local", "--port", str(port)],
                               stderr=subprocess.PIPE, text=True, env=_clean_env())  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as response:
                    assert json.load(response)["data"][0]["id"] == "smollm2-135m-instruct"
                    break
            except OSError:
                assert time.monotonic() < deadline, "serve-local never answered"
                time.sleep(0.05)  # often answers before the CLI saw it ready: Ctrl-C then lands in its start-up
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # Ctrl-C did not stop it: fail, leaving no server behind
            process.kill()
            process.wait()
            raise
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
