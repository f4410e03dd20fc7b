"""No process-wide side effects: sessions closed at exit, Ctrl-C stops the requests of a sync run.

Each case is a real Python process against a scripted server in this one; the server sees the
connections close.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from waits import still_running, wait_until

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from langgraph.graph import END, START, MessagesState, StateGraph
    from pacore_graph import PaCoReConfig, PaCoReNode, asolve, chat_model, solve

    url, how = sys.argv[1], sys.argv[2]
    model = chat_model(url, model="mock-model")
    config = PaCoReConfig(rounds=[4])
    builder = StateGraph(MessagesState)
    builder.add_node("think", PaCoReNode(model, config))
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    graph = builder.compile()
    question = {"messages": [("user", "q")]}
    try:
        if how == "asolve":
            print(asyncio.run(asolve(model, "q", config)).answer)
        elif how == "agraph":
            print(asyncio.run(graph.ainvoke(question))["messages"][-1].content)
        elif how == "solve":
            print(solve(model, "q", config).answer)
        else:
            print(graph.invoke(question)["messages"][-1].content)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def run_script(tmp_path, url: str, how: str) -> subprocess.Popen:
    script = tmp_path / "user.py"
    script.write_text(SCRIPT)
    command = [sys.executable, "-X", "dev", str(script), url, how]  # dev mode: ResourceWarnings are shown
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("how", ["asolve", "agraph", "solve", "graph"])
def test_sessions_are_closed_at_exit(mock_server, tmp_path, how):
    with mock_server(lambda body, attempt: {"content": "an answer"}) as server:
        out, err = run_script(tmp_path, server.base_url, how).communicate(timeout=120)
    assert out.strip() == "an answer", err
    assert "Unclosed" not in err and "unclosed" not in err, err


@pytest.mark.parametrize("how", ["solve", "graph"])
def test_ctrl_c_in_a_sync_run_cancels_its_requests(mock_server, tmp_path, how):
    with mock_server(lambda body, attempt: {"content": "late", "delay": 60}) as server:
        process = run_script(tmp_path, server.base_url, how)
        wait_until(  # round 1's four trajectories in flight
            lambda: still_running(process) and len(server.requests) >= 4,
            60,
            what=lambda: f"{len(server.requests)} of round 1's 4 requests",
        )
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
        wait_until(lambda: server.disconnected >= 4, 10, what=lambda: f"{server.disconnected} of 4 requests closed")
    assert out.strip() == "interrupted" and process.returncode == 130, err
    assert server.disconnected == 4, "every in-flight request was closed, not left to run on"
    assert len(server.requests) == 4, "no request was sent after the interrupt"


LOOPS_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, sys
    from pacore_graph import PaCoReChatModel, PaCoReConfig, asolve, chat_model

    model = chat_model(sys.argv[1], model="mock-model")
    pacore = PaCoReChatModel(model=model, config=PaCoReConfig(rounds=[2]))
    for number in range(50):  # an app or a test suite running one loop per request
        asyncio.run(pacore.ainvoke("q") if number % 2 else asolve(model, "q", PaCoReConfig(rounds=[2])))
    gc.collect()
    print(sum(isinstance(o, asyncio.AbstractEventLoop) for o in gc.get_objects()))
    """
)


def test_event_loops_that_used_a_model_are_not_kept_alive(mock_server):
    """50 ``asyncio.run`` calls through one chat model and one PaCoReChatModel: their loops are collected once
    closed (each loop's connection pool, semaphore and admission are dropped as it shuts down)."""
    with mock_server(lambda body, attempt: {"content": "done"}) as server:
        done = subprocess.run(
            [sys.executable, "-c", LOOPS_SCRIPT, server.base_url], capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip().splitlines()[-1]) <= 2
    assert len(server.requests) == 50 * 3
