"""`pacore swe eval`: one evaluation per folder, and a stored report reused only for the same patch, test
spec and harness (real containers; only containers labelled with this test's processes are looked at)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from waits import still_running, wait_until

from pacore_agents.swe.docker_sandbox import leftover_sandboxes
from pacore_agents.swe.evaluation import GRADING_FILE, evaluate
from pacore_agents.swe.tasks import load_tasks

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
ROMAN = "pacore__roman-1"
# A patch that fixes nothing (the README only): it applies, and the tests that must pass still fail.
NO_FIX = (
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,4 @@\n # roman\n \n"
    " Convert integers to Roman numerals.\n+No fix here.\n"
)
# A patch whose tests wait until the test lets them go: an evaluation that holds its folder for as long as
# the test needs, whatever the machine's speed.
WAIT = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    "@@ -0,0 +1,4 @@\n+import os, time\n+\n+while not os.path.exists('/tmp/go-on'):\n+    time.sleep(0.1)\n"
)


@pytest.fixture(scope="module")
def row(local_tasks) -> dict:
    [task] = local_tasks(ROMAN)
    return task


def predictions(tmp_path: Path, name: str, patch: str) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps({"instance_id": ROMAN, "model_name_or_path": "model", "model_patch": patch}) + "\n")
    return path


def eval_args(source: Path | str, output: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pacore_graph.cli",
        "swe",
        "eval",
        "--dataset",
        "local",
        "--instances",
        ROMAN,
        "--predictions",
        str(source),
        "--run-id",
        "run",
        "--output",
        str(output),
    ]


def containers_of(pid: int) -> list[str]:
    command = ["docker", "ps", "-aq", "--filter", "label=pacore.sandbox", "--filter", f"label=pacore.pid={pid}"]
    return subprocess.run(command, capture_output=True, text=True).stdout.split()


def test_a_second_eval_into_a_folder_in_use_is_refused_in_one_line(row, tmp_path):
    output = tmp_path / "eval"
    first = subprocess.Popen(
        eval_args(predictions(tmp_path, "wait", WAIT), output),
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # grading has begun: the folder is locked and work is under way
        wait_until(lambda: still_running(first) and containers_of(first.pid), 300, what="the first grading began")
        second = subprocess.run(eval_args("gold", output), cwd=ROOT, capture_output=True, text=True, timeout=300)
        [container] = containers_of(first.pid)
        subprocess.run(["docker", "exec", container, "touch", "/tmp/go-on"], check=True, capture_output=True)
        stdout, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    in_use = f"{output} is in use by another run (pid {first.pid}): wait for it to end or choose another output folder"
    assert second.returncode == 1 and second.stderr.strip().splitlines() == [f"pacore: error: {in_use}"]
    assert json.loads(second.stdout) == {
        "command": "swe eval",
        "exit_code": 1,
        "output": str(output),
        "counts": {},
        "error": in_use,
    }
    assert first.returncode == 0, stderr[-3000:]
    assert json.loads(stdout.splitlines()[-1])["unresolved_ids"] == [ROMAN]
    assert not (output / "run" / "gold").exists(), "the refused evaluation wrote nothing"
    assert containers_of(first.pid) == []


def test_a_stored_report_is_reused_only_for_the_same_patch_and_regraded_otherwise(row, tmp_path, client):
    output = tmp_path / "eval"
    no_fix, gold = predictions(tmp_path, "no-fix", NO_FIX), predictions(tmp_path, "gold", row["patch"])
    graded = subprocess.run(eval_args(no_fix, output), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert graded.returncode == 0, graded.stderr[-3000:]
    assert json.loads(graded.stdout.splitlines()[-1])["unresolved_ids"] == [ROMAN]
    assert "graded now 1, stored reports reused 0" in graded.stderr

    # The same run id and model with another patch: the stored report is not this patch's, so it is graded again.
    regraded = subprocess.run(eval_args(gold, output), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert regraded.returncode == 0, regraded.stderr[-3000:]
    summary = json.loads(regraded.stdout.splitlines()[-1])
    assert summary["resolved_ids"] == [ROMAN] and summary["regraded_ids"] == [ROMAN] and summary["reused_ids"] == []
    assert "of them 1 graded again over a stored report of another patch, test spec or harness" in " ".join(
        regraded.stderr.split()
    )
    folder = output / "run" / "model" / ROMAN
    assert (folder / "patch.diff").read_text() == row["patch"]
    assert json.loads((folder / "report.json").read_text())[ROMAN]["resolved"] is True

    # The same patch once more: the stored report is reused, no container is started.
    rows = load_tasks("local", instances=[ROMAN])
    again = evaluate(rows, {ROMAN: json.loads(gold.read_text())}, run_id="run", output_dir=output, progress=False)
    assert again.resolved_ids == [ROMAN] and again.reused_ids == [ROMAN] and again.regraded_ids == []

    # A report from before grading.json existed (or with another harness) is graded again.
    (folder / GRADING_FILE).unlink()
    older = evaluate(rows, {ROMAN: json.loads(gold.read_text())}, run_id="run", output_dir=output, progress=False)
    assert older.regraded_ids == [ROMAN] and older.resolved_ids == [ROMAN]
    assert leftover_sandboxes(client) == []
