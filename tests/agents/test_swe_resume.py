"""`pacore swe run` killed with SIGKILL mid-instance resumes it: finished episodes are neither re-run nor lost.

A scripted tool-calling model on loopback (the same script as the CLI test in test_swe_pacore.py) serves
one local task with --rounds 2: two round-1 episodes, then one synthesis episode. The server holds the
second episode's first reply until the test has killed the run, so the kill lands after the first
episode finished and while the second is in flight. The restarted run must call the model for the second
episode and the synthesis only, write one prediction, and keep all three episodes in the trajectory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mock_openai import MockOpenAIServer
from test_swe_pacore import ROMAN, pacore, pacore_script, sandbox_containers
from waits import still_running, wait_until

from pacore_agents.swe.run import PREDICTIONS_FILE, trajectory_path

ROOT = Path(__file__).resolve().parents[2]


class HoldingServer(MockOpenAIServer):
    """Holds every request that ``hold(body)`` picks (without blocking the others) until ``release``."""

    def __init__(self, handler, hold):
        super().__init__(handler)
        self.hold = hold
        self.held = 0
        self.holding = True
        self.release = threading.Event()

    async def _chat(self, request):
        body = await request.json()  # aiohttp caches the body: the parent reads it again
        if self.holding and self.hold(body):
            self.held += 1
            await asyncio.to_thread(self.release.wait)
        return await super()._chat(request)


@contextlib.contextmanager
def release_at_exit(server: HoldingServer):
    """Let a held handler end (its client is dead by then), or the server cannot shut down."""
    try:
        yield
    finally:
        server.release.set()


def first_request_of_second_episode():
    """The second round-1 request that has no tool result yet: the other episode's opening call."""
    seen = {"openings": 0}

    def hold(body: dict) -> bool:
        messages = body["messages"]
        opening = "Reference Responses" not in messages[1]["content"] and not any(m["role"] == "tool" for m in messages)
        if opening:
            seen["openings"] += 1
        return opening and seen["openings"] == 2

    return hold


def finished_trajectory_writes(folder: Path) -> int:
    """Finished episodes whose result LangGraph has saved (pending writes of the PaCoRe `trajectories` channel)."""
    path = folder / "checkpoints.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
            query = "SELECT count(*) FROM writes WHERE channel = 'trajectories' AND instr(value, ?) > 0"
            return db.execute(query, (b"content_length",)).fetchone()[0]  # a finished trajectory's record
    except sqlite3.OperationalError:  # tables not created yet, or the writer holds a lock
        return 0


def episode_logs(folder: Path) -> list[Path]:
    """The batch engine's record files of the instances in flight (one per instance)."""
    return sorted((folder / "records").glob("*.jsonl"))


def run_args(server: MockOpenAIServer, out: Path, runtime: str) -> list[str]:
    return [
        "swe",
        "run",
        "--dataset",
        "local",
        "--instances",
        ROMAN,
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--rounds",
        "2",
        "--runtime",
        runtime,
        "--output",
        str(out),
    ]


def requests_after(requests: list[dict], tool_output: str) -> int:
    """Model requests whose conversation holds ``tool_output``: the requests of one episode after it."""
    return sum(any(m["role"] == "tool" and tool_output in m["content"] for m in b["messages"]) for b in requests)


def kill_then_resume(tmp_path: Path, runtime: str) -> None:
    from pacore_agents.swe.tasks import load_tasks

    row = load_tasks("local", instances=[ROMAN])[0]
    out = tmp_path / "run"
    server = HoldingServer(pacore_script(row["patch"]), first_request_of_second_episode())
    with server, release_at_exit(server):
        args = run_args(server, out, runtime)
        process = subprocess.Popen(
            [sys.executable, "-m", "pacore_graph.cli", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_until(
                lambda: still_running(process, "the run") and finished_trajectory_writes(out) >= 1 and server.held >= 1,
                60,
                what="the first episode finished",
            )
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        first_process_requests = list(server.requests)
        server.holding = False
        assert len(first_process_requests) == 3, "episode 1 made 3 calls, episode 2 was held at its first"
        first_output = next(m["content"] for m in first_process_requests[-1]["messages"] if m["role"] == "tool")
        first_uuid = first_output.split("\n")[1].strip()  # "[exit code 0]\n<uuid>"
        assert not (out / PREDICTIONS_FILE).exists() or not (out / PREDICTIONS_FILE).read_text().strip()
        (episode_log,) = episode_logs(out)
        assert len(episode_log.read_text().splitlines()) == 1, "the finished episode was logged"
        with sqlite3.connect(out / "checkpoints.sqlite") as db:
            namespaces = {ns for (ns,) in db.execute("SELECT DISTINCT checkpoint_ns FROM checkpoints")}
        assert namespaces == {""}, "an episode's own steps are not checkpointed (a fresh sandbox cannot resume them)"

        again = pacore(*args)
        assert again.returncode == 0, again.stderr[-3000:]
        resumed_requests = len(server.requests)
        done = pacore(*args)  # a third run has nothing left to do
        assert done.returncode == 0 and "1 already done" in done.stderr, done.stderr[-2000:]
        assert len(server.requests) == resumed_requests

    answered = server.requests[:resumed_requests]
    # The finished episode was not redone: its conversation reached the model twice (apply, submit), in
    # the first process only; the restart ran the second episode (3 calls) and the synthesis (2 calls).
    assert requests_after(answered, first_uuid) == 2
    assert resumed_requests - len(first_process_requests) == 5
    openings = [b for b in answered if len(b["messages"]) == 2 and "Reference" not in b["messages"][1]["content"]]
    assert len(openings) == 2, "one opening per round-1 episode (the held one never got its reply)"

    lines = (out / PREDICTIONS_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"instance_id": ROMAN, "model_name_or_path": "scripted", "model_patch": row["patch"]}
    ]
    trajectory = json.loads(trajectory_path(out, ROMAN).read_text())
    episodes = trajectory["episodes"]
    assert [(e["round_index"], e["index"]) for e in episodes] == [(0, 0), (0, 1), (1, 0)]
    assert all(e["stop_reason"] == "submitted" for e in episodes)
    assert sum(first_uuid in json.dumps(e["messages"]) for e in episodes) == 1, "the first episode, recorded once"
    synthesis_prompt = episodes[2]["messages"][1]["content"]
    assert synthesis_prompt.count("+# attempt ") == 2, "the synthesis saw both candidates, the resumed one too"
    assert not episode_logs(out), "the episode log goes once the instance's row is written"
    with sqlite3.connect(out / "checkpoints.sqlite") as db:
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0, "the instance's thread was deleted"


def test_local_run_killed_mid_instance_resumes_without_redoing_the_finished_episode(tmp_path):
    kill_then_resume(tmp_path, "local")


@pytest.mark.docker
def test_docker_run_killed_mid_instance_resumes_and_leaves_no_containers(tmp_path):
    assert subprocess.run(["docker", "info"], capture_output=True).returncode == 0, "run scripts/docker-setup.sh"
    mine_before = set(sandbox_containers(full=True))
    kill_then_resume(tmp_path, "docker")
    # Other runs may share the daemon: what this test left is what no live process owns.
    left = {c for c in set(sandbox_containers(full=True)) - mine_before if _owner_is_gone(c)}
    assert not left, f"sandbox containers left behind: {left}"


def _owner_is_gone(container_id: str) -> bool:
    import docker

    from pacore_agents.swe.images import docker_client
    from pacore_agents.swe.owners import owner_is_dead

    try:
        return owner_is_dead(docker_client().containers.get(container_id).labels)
    except docker.errors.NotFound:
        return False
