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
from pathlib import Path

import pytest
from multichallenge_mock import MockServer, write_data
from waits import wait_until

from pacore_benchmarks.multichallenge.runner import problem_id
from pacore_benchmarks.perf.faults import saved_trajectories

REPO = Path(__file__).resolve().parents[2]


def cli_command(data: Path, output: Path, url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pacore_benchmarks.multichallenge.cli",
        "--data",
        str(data),
        "--base-url",
        url,
        "--rounds",
        "4",
        "--workers",
        "4",
        "--max-tokens",
        "32",
        "--output",
        str(output),
    ]


def result_rows(output: Path) -> list[dict]:
    path = output / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def saved_trajectories_of(output: Path) -> int:
    """Trajectories the checkpoints hold of the conversations without a row (LangGraph's saved writes)."""
    written = {problem_id(row["question_id"], row["sample"]) for row in result_rows(output)}
    return asyncio.run(saved_trajectories(output, written))


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
            wait_until(lambda: server.held.is_set() and len(result_rows(output)) == 3, 120, what="3 rows, a held call")
            # the kill lands once the three finished trajectories of c3 are in its checkpoint
            wait_until(lambda: saved_trajectories_of(output) == 3, 60, what="c3's three trajectories saved", every=0.1)
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
