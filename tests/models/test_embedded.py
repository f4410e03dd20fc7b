"""Integration with the real embedded model: SmolLM2-135M behind llama-cpp-python's server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph
from waits import wait_until

from pacore_graph import PaCoReConfig, PaCoReNode, asolve, chat_model
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.models.embedded import free_port

pytestmark = pytest.mark.embedded


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OPENAI_BASE_URL", None)
    return env


def test_pacore_solve_runs_on_the_embedded_model_with_no_server_given(tmp_path):
    output = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "pacore_graph.cli",
        "solve",
        "What is 17*23?",
        "--rounds",
        "2",
        "--max-tokens",
        "96",
        "--output",
        str(output),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_clean_env())
    assert done.returncode == 0, done.stderr
    answer, last = done.stdout.rstrip("\n").rsplit("\n", 1)  # the answer, then the JSON summary line
    assert answer.strip() and json.loads(last)["answer"] == answer
    assert "effective TTC" in done.stderr and "final round" in done.stderr
    (summary,) = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert [r["k"] for r in summary["rounds"]] == [2, 1]
    assert summary["ttc"] == sum(t["completion_tokens"] for r in summary["rounds"] for t in r["trajectories"])
    assert summary["ttc"] > 0 and not summary["ttc_approximate"]  # llama.cpp reports usage
    assert summary["answer"] == answer
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
    conversation = [
        ("system", "You answer briefly."),
        ("user", "Name a colour."),
        ("assistant", "Blue."),
        ("user", "Name a fruit."),
    ]
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
    # the server reports streamed usage as vLLM does (stream_options.include_usage): counted, not estimated
    for record in (t for round_ in result.rounds for t in round_.trajectories):
        assert record.prompt_tokens > 10 and 0 < record.completion_tokens <= 24 and not record.tokens_approximate


def test_serve_local_serves_and_stops():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pacore_graph.cli", "serve-local", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    try:

        def served() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as response:
                    return str(json.load(response)["data"][0]["id"])
            except OSError:
                return None

        # it often answers before the CLI saw it ready: Ctrl-C then lands in its start-up
        assert wait_until(served, 180, what="serve-local answered", every=0.05) == "smollm2-135m-instruct"
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


def test_the_embedded_client_reads_the_servers_context_and_caps_replies(embedded_server):
    """The context comes from the server (``/props``, as llama.cpp's own server reports it) and fits PaCoRe's
    synthesis prompts; a reply that names no max_tokens is capped; one that names it is not."""
    from pacore_graph.models.embedded import EMBEDDED_MAX_TOKENS
    from pacore_graph.models.preflight import served_context, with_model_context

    assert served_context(embedded_server.base_url) == embedded_server.n_ctx == 8192
    model = chat_model(embedded_server.base_url)
    assert model.profile == {"max_input_tokens": 8192, "max_output_tokens": EMBEDDED_MAX_TOKENS}
    assert with_model_context(PaCoReConfig(), model).context_window == 8192
    assert with_model_context(PaCoReConfig(context_window=4096), model).context_window == 4096  # the user's wins
    assert with_model_context(PaCoReConfig(compat="reference"), model).context_window is None
    assert model.payload([])["max_tokens"] == EMBEDDED_MAX_TOKENS
    assert model.payload([], max_tokens=7)["max_tokens"] == 7
    assert chat_model(embedded_server.base_url, max_tokens=9).payload([])["max_tokens"] == 9
    long_reply = [{"role": "user", "content": "Write a very long story about a dragon, chapter by chapter."}]
    reply = run_sync(model.acomplete(long_reply, min_tokens=EMBEDDED_MAX_TOKENS + 100))  # would run past the cap
    run_sync(model.aclose())
    assert reply["usage"]["completion_tokens"] == EMBEDDED_MAX_TOKENS and reply["finish_reason"] == "length"


def cpu_seconds(pid: int) -> float:
    """CPU time a process has spent (all its threads), from Linux's /proc: a counter that grows only while it works."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # the fields after the command's name
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, in clock ticks


def test_an_abandoned_serve_request_stops_generating_on_the_embedded_server(embedded_server):
    """llama-cpp-python's own server generates a non-streamed reply to its end after the client left; the
    embedded server ends it at the next token. Through ``pacore serve``: the client hangs up, the endpoint
    closes its upstream requests, and each generation they started stops (here it was asked for 4000 tokens
    at least: minutes on two cores)."""
    from endpoint import ProbedServer, send_request

    from pacore_graph.server import create_app

    def generations(log: str) -> list[int]:  # tokens generated by each finished generation, from llama.cpp's log
        return [
            int(runs)
            for runs in re.findall(r"^llama_perf_context_print:\s+eval time =.*/\s+(\d+) runs", log, re.MULTILINE)
        ]

    def since_start() -> str:
        return embedded_server.log_tail(10**9)[len(before) :]

    chat = chat_model(embedded_server.base_url)
    before = embedded_server.log_tail(10**9)
    body = {
        "model": chat.model,
        "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
        "max_tokens": 4000,
        "min_tokens": 4000,
    }
    assert embedded_server.process is not None
    pid = embedded_server.process.pid
    with ProbedServer(create_app(chat, PaCoReConfig(rounds=[2]))) as server:
        idle, cpu = server.tasks(), cpu_seconds(pid)
        connection = send_request(server, body)
        # the endpoint sent round 1 upstream and the first trajectory is generating: the model server spends CPU
        # (a second of it is tens of tokens, far past the prompt) while its log says nothing until a reply ends
        wait_until(lambda: cpu_seconds(pid) - cpu >= 1.0, 120, what="the embedded server never began generating")
        connection.close()
        wait_until(
            lambda: generations(since_start()),
            120,
            what=lambda: f"the abandoned generation did not end:\n{since_start()[-2000:]}",
        )
        # settled: the endpoint runs nothing of the request any more, so it sends nothing more; and the model is
        # free, so whatever reached it has been generated and logged (GET /props waits for the model's lock,
        # which llama-cpp-python's server hands out in turn: after every request that queued before it)
        wait_until(lambda: server.tasks() <= idle, what=lambda: f"the endpoint still runs {server.tasks() - idle}")
        with urllib.request.urlopen(f"http://127.0.0.1:{embedded_server.port}/props", timeout=120) as response:
            assert response.status == 200
    log = since_start()
    runs = generations(log)
    assert 1 <= len(runs) <= 2 and max(runs) < 1000, (runs, log[-2000:])  # no synthesis round; cut short
    assert "Llama.generate" not in log[log.rfind("eval time") :]  # nothing started after them
    quick = run_sync(chat.acomplete([{"role": "user", "content": "Hi"}], max_tokens=4))  # the model is free again
    run_sync(chat.aclose())
    assert quick["usage"]["completion_tokens"] <= 4


def test_each_start_samples_from_its_own_seed_and_a_given_seed_repeats_a_run(monkeypatch):
    """Temperature 1.0 on a fresh server: two starts without a seed answer the same first request differently
    (their seeds differ); two with PACORE_EMBEDDED_SEED set answer it byte for byte alike."""
    from pacore_graph.models.embedded import SEED_VARIABLE, EmbeddedServer

    def first_reply(seed_variable: str | None) -> tuple[int, str]:
        if seed_variable is None:
            monkeypatch.delenv(SEED_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(SEED_VARIABLE, seed_variable)
        with EmbeddedServer(n_ctx=1024) as server:
            body = {
                "model": server.model,
                "messages": [{"role": "user", "content": "Tell me a story."}],
                "temperature": 1.0,
                "max_tokens": 24,
            }
            request = urllib.request.Request(
                f"{server.base_url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                return server.seed, json.load(response)["choices"][0]["message"]["content"]

    (seed_a, random_a), (seed_b, random_b) = first_reply(None), first_reply(None)
    assert seed_a != seed_b and random_a != random_b
    (seed_c, fixed_c), (seed_d, fixed_d) = first_reply("7"), first_reply("7")
    assert seed_c == seed_d == 7 and fixed_c == fixed_d


def test_a_seed_that_is_not_a_number_is_refused(monkeypatch):
    from pacore_graph.errors import PaCoReError
    from pacore_graph.models.embedded import SEED_VARIABLE, sampling_seed

    monkeypatch.setenv(SEED_VARIABLE, "seven")
    with pytest.raises(PaCoReError, match="PACORE_EMBEDDED_SEED='seven' is not an integer"):
        sampling_seed()
    assert sampling_seed(3) == 3
