"""langgraph.json: `langgraph dev` serves the PaCoRe chat graph in LangGraph's own server, with the settings of
`.env` (the file langgraph.json names; `.env.example` is its documented template)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from waits import still_running, wait_until

from pacore_graph.models.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.embedded


def _post(url: str, payload: dict, timeout: float) -> dict:
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def _descendants(pid: int) -> list[str]:
    """Command lines of every process under ``pid`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        except (ValueError, OSError, IndexError):
            continue
    found, stack = [], list(children.get(pid, []))
    while stack:
        child = stack.pop()
        stack.extend(children.get(child, []))
        try:
            found.append((Path("/proc") / str(child) / "cmdline").read_text().replace("\0", " "))
        except OSError:
            pass
    return found


@contextmanager
def langgraph_dev(folder: Path, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen]]:
    """`langgraph dev` run from ``folder`` on the repo's own langgraph.json (paths made absolute, so the server's
    scratch state stays in ``folder``; ``env`` kept as the repo has it: relative to where the server runs)."""
    cli = shutil.which("langgraph", path=str(Path(sys.executable).parent))
    assert cli, "langgraph-cli[inmem] is part of the dev extra"
    config = json.loads((ROOT / "langgraph.json").read_text())
    config["dependencies"] = [str(ROOT)]
    config["graphs"] = {name: str(ROOT / spec) for name, spec in config["graphs"].items()}
    (folder / "langgraph.json").write_text(json.dumps(config))
    port = free_port()
    process = subprocess.Popen(
        [
            cli,
            "dev",
            "--config",
            str(folder / "langgraph.json"),
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=folder,
        env=env,
        stdout=(folder / "server.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a kill reaches whatever it started
    )
    try:

        def answers() -> bool:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ok", timeout=2)
            except OSError:
                return not still_running(process, "langgraph dev")
            return True

        wait_until(answers, 180, what="langgraph dev answered /ok", every=1)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # SIGTERM did not stop it: fail, leaving no server behind
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise


def _clean_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PACORE_"))}
    return {**env, **settings}


def test_langgraph_dev_serves_the_pacore_graph_on_a_thread_for_two_turns(tmp_path):
    """The server checkpoints each thread (``configurable`` included): PaCoRe must put nothing unpicklable there."""
    with langgraph_dev(tmp_path, _clean_env(PACORE_ROUNDS="2", PACORE_MAX_TOKENS="48")) as (base, _):
        thread = _post(f"{base}/threads", {}, timeout=30)["thread_id"]
        turns = []
        for question in ("Say hi.", "Now say bye."):
            turn = {"assistant_id": "pacore_chat", "input": {"messages": [{"role": "user", "content": question}]}}
            turns.append(_post(f"{base}/threads/{thread}/runs/wait", turn, timeout=600))
        state = json.load(urllib.request.urlopen(f"{base}/threads/{thread}/state", timeout=30))
    log = (tmp_path / "server.log").read_text()[-3000:]
    for out in turns:
        assert "__error__" not in out, (out, log)
    messages = state["values"]["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "human", "ai"], (messages, log)  # two turns, one thread
    for answer in (messages[1], messages[3]):
        assert answer["content"].strip()
        assert [r["k"] for r in answer["response_metadata"]["pacore"]["rounds"]] == [2, 1]
    assert "pickle" not in log.lower()


def test_langgraph_dev_takes_its_settings_from_dot_env(tmp_path, mock_server):
    """OPENAI_BASE_URL and PACORE_ROUNDS in `.env` (not in the environment): the graph talks to that server and
    starts no embedded model of its own."""
    assert json.loads((ROOT / "langgraph.json").read_text())["env"] == ".env"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    with mock_server(lambda body, attempt: {"content": "Hello from the server in .env.", "usage": usage}) as upstream:
        (tmp_path / ".env").write_text(f"OPENAI_BASE_URL={upstream.base_url}\nPACORE_ROUNDS=3\n")
        with langgraph_dev(tmp_path, _clean_env()) as (base, process):
            turn = {"assistant_id": "pacore_chat", "input": {"messages": [{"role": "user", "content": "Say hi."}]}}
            out = _post(f"{base}/runs/wait", turn, timeout=300)
            servers = [line for line in _descendants(process.pid) if "llama" in line]
    log = (tmp_path / "server.log").read_text()[-3000:]
    assert "__error__" not in out, (out, log)
    answer = out["messages"][-1]
    assert answer["content"] == "Hello from the server in .env."
    assert [r["k"] for r in answer["response_metadata"]["pacore"]["rounds"]] == [3, 1]
    assert len(upstream.requests) == 4  # three trajectories and the synthesis, all at the server .env names
    assert servers == [], servers  # no embedded model started beside it
