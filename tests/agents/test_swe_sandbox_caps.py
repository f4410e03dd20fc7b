"""Sandboxes that never lose a patch: what a command leaves running is ended before the next step and the
diff, a write past the disk cap is undone, and the diff needs neither free process slots nor the watcher.

The first tests drive a DockerSandbox directly; the last ones run `pacore swe run` as a user would, with a
scripted tool-calling model, and check the prediction, the trajectory's notes and that no container of
theirs is left (only containers labelled with the test's own processes are looked at: the daemon is shared).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mock_openai import MockOpenAIServer
from scripted_chat import tool_call

from pacore_agents.swe.docker_sandbox import DockerSandbox, leftover_sandboxes
from pacore_agents.swe.run import PREDICTIONS_FILE, trajectory_path

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
ROMAN = "pacore__roman-1"
EDIT = "echo '# edited by the episode' >> roman/__init__.py"
DETACHED = "for i in $(seq 300); do setsid sleep 1000 >/dev/null 2>&1 </dev/null & done; echo started"
EIGHT_GIB = "for i in 1 2 3 4; do fallocate -l 2G f$i; done; echo written"
PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"


@pytest.fixture(scope="module")
def row(local_tasks) -> dict:
    [task] = local_tasks(ROMAN)
    return task


@pytest.fixture(autouse=True)
def no_container_left(client):
    yield
    assert [c.name for c in leftover_sandboxes(client)] == []  # this test process's sandboxes only


def _command_lines(box: DockerSandbox) -> list[str]:
    return [line for line in box.run(PROCESSES).output.splitlines() if line.strip()]


def test_processes_a_command_leaves_are_ended_and_the_next_command_and_diff_run(row):
    with DockerSandbox(row, pids=64) as box:
        assert box.run(EDIT).exit_code == 0
        flood = box.run(DETACHED)
        assert "fork" in flood.output  # the cap was hit: some of the 300 could not start
        assert flood.notes and "process(es) the command left running were stopped" in flood.notes[0]
        assert flood.notes[0] in flood.output  # the model reads it too
        after = box.run("echo still usable")
        assert after.exit_code == 0 and after.output == "still usable\n" and after.notes == []
        left = _command_lines(box)
        assert not any("sleep 1000" in line for line in left), left
        assert any("sleep infinity" in line for line in left)  # the container's keeper stays
        assert "+# edited by the episode" in box.diff()


def test_a_full_process_table_does_not_starve_the_diff(row):
    """The model's last command fills the process cap and exits: the diff still reads the edit."""
    with DockerSandbox(row, pids=64) as box:
        box.run(f"{EDIT}; {DETACHED}")
        assert "+# edited by the episode" in box.diff()
        assert any("stopped" in note for note in box.notes)


def test_a_command_that_ends_the_keeper_gets_the_sandbox_restarted_with_its_files(row, client):
    with DockerSandbox(row) as box:
        first_start = client.api.inspect_container(box.container_id)["State"]["StartedAt"]
        ended = box.run(f"{EDIT}; kill -9 -1")
        assert any("the sandbox was restarted (files kept, every process ended)" in note for note in ended.notes)
        assert client.api.inspect_container(box.container_id)["State"]["StartedAt"] != first_start
        assert box.run("echo back").output == "back\n"
        assert "+# edited by the episode" in box.diff()


def test_a_fast_write_past_the_disk_cap_is_removed_and_the_edit_kept(row):
    """fallocate writes gigabytes in a blink, far faster than any watcher polls: the check after the command
    removes what it wrote past the cap, largest first, and the patch keeps the edit without the filler."""
    with DockerSandbox(row, disk="1g") as box:
        assert box.run(EDIT).exit_code == 0
        filled = box.run("for i in 1 2 3 4; do fallocate -l 512M fill$i; done; echo written")
        assert "written" in filled.output
        [note] = filled.notes
        assert "went past this sandbox's disk cap" in note and "fill" in note
        assert box.disk_used() <= box.disk_cap
        kept = box.run("ls fill* 2>/dev/null | wc -l").output.strip()
        assert int(kept) <= 1  # at most one 512 MiB file fits under the 1 GiB cap with the rest
        patch = box.diff()
        assert "+# edited by the episode" in patch and "fill" not in patch and len(patch) < 10_000


def test_a_slow_write_past_the_cap_is_stopped_while_it_runs(row):
    with DockerSandbox(row, disk="300m") as box:
        slow = box.run(
            "for i in $(seq 40); do dd if=/dev/zero of=/tmp/slow$i bs=1M count=20 2>/dev/null; "
            "sleep 0.2; done; echo finished",
            timeout=120,
        )
        assert "finished" not in slow.output
        assert any("was stopped at this sandbox's disk cap" in note for note in slow.notes)
        assert box.disk_used() <= box.disk_cap
        assert box.run("echo usable").output == "usable\n"


def test_the_diff_does_not_need_the_models_shell_or_scratch_space(row):
    """A broken login profile fails every later `bash -lc`, and a full /run/pacore leaves no room: the diff
    runs in its own `bash -c` after emptying pacore's scratch tmpfs, and writes nothing into the repository."""
    with DockerSandbox(row) as box:
        box.run(
            f"{EDIT}; head -c 70000000 /dev/zero > /run/pacore/filler 2>/dev/null; echo 'exit 7' >> /root/.bash_profile"
        )
        assert box.run("echo hi").exit_code == 7
        before = box.disk_used()
        assert "+# edited by the episode" in box.diff()
        assert box.disk_used() - before < 64 * 1024  # no index, no blob written into the container's layer


def test_big_files_are_left_out_of_the_patch_and_noted(row):
    with DockerSandbox(row) as box:
        box.run(f"{EDIT}; head -c 40000000 /dev/zero | tr '\\0' 'x' > big.log")
        patch = box.diff()
        assert "+# edited by the episode" in patch and "big.log" not in patch
        assert any("left out of the patch" in note and "big.log" in note for note in box.notes)


# --------------------------------------------------------------------------------- episodes, as a user runs them


def edit_then(command: str):
    """A scripted model: edit, then ``command``, then submit (its reply is a function of the conversation)."""

    def handler(body: dict, attempt: int) -> dict:
        done = sum(m["role"] == "tool" for m in body["messages"])
        if done == 0:
            return {"content": "", "tool_calls": [tool_call("bash", {"command": EDIT}, "c0")]}
        if done == 1:
            return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, "c1")]}
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "edited"}, "c2")]}

    return handler


def run_pacore(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`pacore ARGS` in a child process; its result and its pid (its sandboxes carry it as a label)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pacore_graph.cli", *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), process.pid


def containers_of(pid: int) -> list[str]:
    command = ["docker", "ps", "-aq", "--filter", "label=pacore.sandbox", "--filter", f"label=pacore.pid={pid}"]
    return subprocess.run(command, capture_output=True, text=True).stdout.split()


@pytest.mark.parametrize(
    ("command", "note"),
    [
        (DETACHED, "process(es) the command left running were stopped"),
        (EIGHT_GIB, "went past this sandbox's disk cap"),
    ],
    ids=["300-detached-processes", "8-GiB-in-one-fast-command"],
)
def test_an_episode_whose_last_command_broke_a_cap_still_yields_its_patch(row, tmp_path, command, note):
    out = tmp_path / "run"
    with MockOpenAIServer(edit_then(command)) as server:
        done, pid = run_pacore(
            "swe",
            "run",
            "--dataset",
            "local",
            "--instances",
            ROMAN,
            "--rounds",
            "0",
            "--base-url",
            server.base_url,
            "--model",
            "scripted",
            "--output",
            str(out),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (out / PREDICTIONS_FILE).read_text().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 10_000_000
    prediction = json.loads(lines[0])
    assert prediction["model_patch"].endswith("+# edited by the episode\n")
    assert "f1" not in prediction["model_patch"]
    [episode] = json.loads(trajectory_path(out, ROMAN).read_text())["episodes"]
    assert episode["stop_reason"] == "submitted"
    assert any(note in line for line in episode["sandbox_notes"]), episode["sandbox_notes"]
    assert "sandbox notes in 1 episode(s)" in done.stderr
    assert containers_of(pid) == []
