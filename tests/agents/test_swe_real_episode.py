"""`pacore swe run` on a real SWE-bench Verified row, with an agent that misbehaves before it fixes the bug.

A scripted tool-calling model (loopback HTTP) drives every episode through `bash` and `submit`: it
leaves 300 orphaned processes, writes a 5 MB file into the repository, applies the fix and submits.
The sandbox must survive the orphans, the 5 MB file must reach the prediction whole (past the command
runner's 4 MB cap), and `pacore swe eval` must grade the prediction resolved. The row's image is built
offline from the fixtures (tests/fixtures/swe).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_chat import tool_call
from test_swe_offline_images import FIXTURES, ROWS, pacore
from test_swe_pacore import sandbox_containers

from pacore_agents.swe.run import PREDICTIONS_FILE, trajectory_path
from pacore_agents.swe.tasks import load_tasks

pytestmark = pytest.mark.docker
ROW = "pytest-dev__pytest-5262"
STEPS = [
    "for i in $(seq 300); do (sleep 0.01 &); done; echo left 300 orphans",
    "head -c 3800000 /dev/urandom | base64 > debug.log; echo END-OF-LOG >> debug.log; wc -c debug.log",
    "git apply <<'PATCH'\n{patch}PATCH\ngit status --short",
]


def misbehaving_fixer(gold_patch: str):
    """Each episode: orphans, a 5 MB file, the fix, submit (its reply depends only on the conversation)."""

    def handler(body: dict, attempt: int) -> dict:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < len(STEPS):
            command = STEPS[done].format(patch=gold_patch)
            return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, f"c{done}")]}
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "fixed the mode"}, "s")]}

    return handler


def test_a_scripted_agent_on_a_real_row_leaves_orphans_and_a_big_file_and_still_resolves(mock_server, tmp_path, client):
    built = pacore(
        "swe", "images", "build", "--dataset", str(ROWS), "--instances", ROW, "--repos", str(FIXTURES / "repos")
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [row] = load_tasks(str(ROWS), instances=[ROW])
    out = tmp_path / "run"
    with mock_server(misbehaving_fixer(row["patch"])) as server:
        done = pacore(
            "swe",
            "run",
            "--dataset",
            str(ROWS),
            "--instances",
            ROW,
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--rounds",
            "2",
            "--output",
            str(out),
        )
        assert done.returncode == 0, done.stderr[-3000:]
    (prediction,) = [json.loads(line) for line in (out / PREDICTIONS_FILE).read_text().splitlines()]
    patch = prediction["model_patch"]
    assert len(patch) > 5_000_000 and "+END-OF-LOG\n" in patch and "bytes cut" not in patch
    fix = row["patch"].split("@@", 2)[2].split("\n", 1)[1]  # the gold hunk's lines (its heading may differ)
    assert fix in patch
    trajectory = json.loads(trajectory_path(out, ROW).read_text())
    assert [e["stop_reason"] for e in trajectory["episodes"]] == ["submitted"] * 3
    assert "left 300 orphans" in json.dumps(trajectory["episodes"][0]["messages"])
    containers = {e["sandbox"]["id"] for e in trajectory["episodes"]}
    assert len(containers) == 3 and not containers & set(sandbox_containers(full=True)), "containers left behind"

    graded = pacore(
        "swe",
        "eval",
        "--dataset",
        str(ROWS),
        "--instances",
        ROW,
        "--predictions",
        str(out / PREDICTIONS_FILE),
        "--run-id",
        "real",
        "--output",
        str(tmp_path / "eval"),
    )
    assert graded.returncode == 0, graded.stderr[-3000:]
    summary = json.loads((tmp_path / "eval" / "real" / "summary.json").read_text())
    assert summary["resolved_ids"] == [ROW]
    applied = Path(tmp_path / "eval" / "real" / "scripted" / ROW / "patch.diff").read_text()
    assert applied == patch
