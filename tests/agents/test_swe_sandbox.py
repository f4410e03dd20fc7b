"""Sandboxes for real: Docker containers (network off, limits, always removed) and the local runtime."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from waits import wait_until

from pacore_agents.swe.docker_sandbox import DockerSandbox
from pacore_agents.swe.local_sandbox import UnsafeRuntimeWarning
from pacore_agents.swe.sandbox import CommandResult, Sandbox, SandboxError, open_sandbox
from pacore_agents.swe.tasks import listed_tests

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("own_sandboxes_removed")]


@pytest.fixture(scope="module")
def row(local_tasks) -> dict:
    [task] = local_tasks("pacore__lrucache-1")
    return task


def sleeping(marker: str) -> list[str]:
    """The processes of this host running ``sleep <marker>``."""
    return subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()


def _gone(client, container_id: str) -> bool:
    import docker

    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def test_commands_run_in_the_repository_at_the_base_commit(row):
    with open_sandbox(row) as box:
        assert isinstance(box, Sandbox)
        assert box.workdir == "/testbed"
        head = box.run("pwd; git rev-parse HEAD")
        assert head == CommandResult(exit_code=0, output=f"/testbed\n{row['base_commit']}\n", timed_out=False)
        failing = box.run("echo to-stdout; echo to-stderr >&2; exit 3")
        assert failing.exit_code == 3 and not failing.timed_out
        assert "to-stdout" in failing.output and "to-stderr" in failing.output
        assert box.run("python3 -m pytest -q tests").exit_code == 0  # the visible tests pass before the fix


def test_container_has_no_network_and_the_requested_limits(row, client):
    with open_sandbox(row, memory="512m", pids=64, cpus=0.5) as box:
        config = client.api.inspect_container(box.container_id)["HostConfig"]
        assert config["NetworkMode"] == "none"
        assert config["Memory"] == 512 * 1024 * 1024
        assert config["PidsLimit"] == 64
        assert config["NanoCpus"] == 500_000_000
        interfaces = box.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").output.split()
        assert interfaces == ["lo"]


def test_timeout_stops_a_command_and_says_so(row):
    with open_sandbox(row) as box:
        started = time.monotonic()
        result = box.run("echo started; sleep 60", timeout=2)
        assert result.timed_out and "started" in result.output
        assert time.monotonic() - started < 20
        assert box.run("echo still usable").output == "still usable\n"


def test_long_output_is_bounded(row):
    with open_sandbox(row) as box:
        result = box.run("head -c 9000000 /dev/zero | tr '\\0' 'x'; echo; echo THE-END")
        assert result.exit_code == 0
        assert len(result.output) < 4_200_000
        assert (
            "bytes cut here: the command printed 9000009 bytes; a command's output is capped at 4000000 bytes"
            in result.output
        )
        assert result.output.rstrip().endswith("THE-END") and result.output_bytes == 9_000_009


def test_hundreds_of_orphans_are_reaped_and_the_sandbox_keeps_working(row):
    """Docker's init is PID 1: exited orphans do not pile up as zombies against the process limit."""
    with open_sandbox(row, pids=256) as box:
        assert box.run("for i in $(seq 300); do (sleep 0.01 &); done; echo spawned").output.endswith("spawned\n")
        zombies = "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l"
        wait_until(lambda: int(box.run(zombies).output) == 0, 10, what="every exited orphan reaped")
        assert box.run("for i in $(seq 50); do true & done; wait; echo fine").output == "fine\n"
        box.run("printf 'x = 1\\n' > extra.py")
        assert "+x = 1" in box.diff()


def test_disk_is_capped_per_file_and_per_container_with_a_clear_message(row, client):
    with open_sandbox(row, disk="300m") as box:
        one_file = box.run("dd if=/dev/zero of=/tmp/one bs=1M count=400 2>&1; echo next")
        assert "File size limit exceeded" in one_file.output and one_file.output.endswith("next\n")
        assert box.run("stat -c %s /tmp/one").output.strip() == str(300 * 1024 * 1024)
        many = box.run(
            "sleep 600 & for i in 1 2 3 4 5 6; do dd if=/dev/zero of=/tmp/f$i bs=1M count=200 2>/dev/null;"
            " done; echo all-written",
            timeout=120,
        )
        assert "the command was stopped at this sandbox's disk cap" in many.output
        # Stopped while it wrote (the watcher polls every 0.5 s) or, when the writes beat the poll, undone by the
        # check after the command: either way its files are gone and the earlier command's file is kept.
        assert "/tmp/f1" in many.output and "/tmp/one" not in many.output  # written by an earlier command
        assert box.run("ls /tmp/f* 2>/dev/null | wc -l").output.strip() == "0"
        processes = box.run("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done").output
        assert "sleep 600" not in processes and "sleep infinity" in processes  # all stopped but the keeper
        assert box.run("rm -f /tmp/one /tmp/f*; echo cleaned").output == "cleaned\n"
        assert box.disk_used() < 300 * 1024 * 1024
        log_config = client.api.inspect_container(box.container_id)["HostConfig"]["LogConfig"]
        assert log_config == {"Type": "json-file", "Config": {"max-file": "1", "max-size": "1m"}}


def test_a_patch_bigger_than_the_output_cap_is_read_whole_and_checked(row):
    with open_sandbox(row) as box:
        box.run("head -c 3500000 /dev/urandom | base64 > debug.log; echo last-line >> debug.log")
        box.run("sed -i 's/return value/return value  # touched/' lrucache/cache.py")
        patch = box.diff()
        assert len(patch) > 4_600_000 and "+last-line\n" in patch and "# touched" in patch
        assert "bytes cut" not in patch
        with pytest.raises(SandboxError, match="does not apply to the base commit"):
            box.check_applies(
                "diff --git a/lrucache/cache.py b/lrucache/cache.py\n--- a/lrucache/cache.py\n"
                "+++ b/lrucache/cache.py\n@@ -1,1 +1,1 @@\n-no such line\n+x\n"
            )
    with open_sandbox(row) as fresh:
        fresh.write_file("/tmp/p.diff", patch)
        assert fresh.run("git apply --check /tmp/p.diff").exit_code == 0


def test_diff_has_text_changes_and_new_files_but_not_binaries(row):
    with open_sandbox(row) as box:
        script = (
            "sed -i 's/return value/return value  # touched/' lrucache/cache.py && "
            "printf 'new text\\n' > NOTES.txt && printf '\\x00\\x01\\x02' > blob.bin && "
            "mkdir -p build/__pycache__ && printf 'x' > build/__pycache__/m.pyc && git add lrucache/cache.py && "
            "PYTHONDONTWRITEBYTECODE= python3 -m pytest -q tests >/dev/null"
        )
        assert box.run(script).exit_code == 0
        status_before = box.run("git status --porcelain").output
        patch = box.diff()
        assert box.run("git status --porcelain").output == status_before  # the agent's index is untouched
        assert "diff --git a/lrucache/cache.py b/lrucache/cache.py" in patch
        assert "# touched" in patch
        assert "diff --git a/NOTES.txt b/NOTES.txt" in patch and "+new text" in patch
        assert "blob.bin" not in patch and ".pyc" not in patch and ".pytest_cache" not in patch
        box.run("git -c user.name=a -c user.email=a@b commit -qam wip")
        assert "# touched" in box.diff()  # committed work still counts: the diff is against the base commit
    with open_sandbox(row) as fresh:
        fresh.write_file("/tmp/p.diff", patch)
        assert fresh.run("git apply --check /tmp/p.diff").exit_code == 0


def test_clean_sandbox_has_an_empty_diff(row):
    with open_sandbox(row) as box:
        assert box.diff() == ""


def test_hidden_tests_never_reach_the_episode_container(row):
    hidden = [test.split("::")[1] for test in listed_tests(row, "FAIL_TO_PASS")]
    visible = listed_tests(row, "PASS_TO_PASS")[0].split("::")[1]  # in the repository: the search finds it
    with open_sandbox(row) as box:
        for name, present in [(visible, True), *((name, False) for name in hidden)]:
            found = box.run(
                f"grep -rlsF --include='*.py' --exclude-dir=proc --exclude-dir=sys -e {name} /", timeout=120
            )
            assert not found.timed_out, f"the search for {name} did not finish"
            assert found.exit_code == (0 if present else 1) and bool(found.output) == present, (name, found)


def test_container_is_removed_after_an_error_and_after_ctrl_c(row, client):
    ids = []
    with pytest.raises(RuntimeError, match="episode failed"):
        with open_sandbox(row) as box:
            ids.append(box.container_id)
            box.run("true")
            raise RuntimeError("episode failed")
    with pytest.raises(KeyboardInterrupt):
        with open_sandbox(row) as box:
            ids.append(box.container_id)
            raise KeyboardInterrupt
    assert all(_gone(client, container_id) for container_id in ids)


def test_close_is_idempotent_and_a_closed_sandbox_refuses_work(row, client):
    box = open_sandbox(row)
    container_id = box.container_id
    box.close()
    box.close()
    assert _gone(client, container_id)
    with pytest.raises(SandboxError, match="closed"):
        box.run("true")


def test_missing_image_names_the_image_and_how_to_get_it(row):
    swe_row = {**row, "image": "swebench/sweb.eval.x86_64.nobody_1776_nothing-1:latest"}
    swe_row.pop("pacore_task_dir")
    with pytest.raises(SandboxError) as info:
        open_sandbox(swe_row)
    assert "swebench/sweb.eval.x86_64.nobody_1776_nothing-1:latest" in str(info.value)
    assert "docker pull" in str(info.value)


def test_docker_host_is_respected(row, monkeypatch, client):
    if os.path.exists("/var/run/docker.sock") and "DOCKER_HOST" not in os.environ:
        monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
        with DockerSandbox(row) as box:
            assert box.run("echo via DOCKER_HOST").output == "via DOCKER_HOST\n"
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/pacore-docker.sock")
    with pytest.raises(SandboxError, match="nonexistent/pacore-docker.sock"):
        open_sandbox(row)


# ------------------------------------------------------------------------------------------ local runtime


def test_local_runtime_warns_and_works_in_a_temporary_copy(row):
    with pytest.warns(UnsafeRuntimeWarning):
        box = open_sandbox(row, runtime="local")
    with box:
        workdir = Path(box.workdir)
        assert workdir.exists() and workdir != Path(row["pacore_task_dir"]) / "repo"
        assert box.run("git rev-parse HEAD").output.strip() == row["base_commit"]
        box.run("printf 'x = 1\\n' > extra.py")
        assert "+x = 1" in box.diff()
        started = time.monotonic()
        slow = box.run("sleep 30 & sleep 30; echo never", timeout=1)
        assert slow.timed_out and "never" not in slow.output and time.monotonic() - started < 10
    assert not workdir.exists()
    assert not (Path(row["pacore_task_dir"]) / "repo" / "extra.py").exists()


def test_local_runtime_hides_secrets_and_ends_every_process_a_command_started(row, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    with pytest.warns(UnsafeRuntimeWarning):
        box = open_sandbox(row, runtime="local")
    marker = f"{700_000 + os.getpid()}"  # `sleep <marker>`: a duration no other process on this host uses
    with box:
        assert box.run("echo key=[$OPENAI_API_KEY]").output == "key=[]\n"
        started = box.run(
            f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 &"
            f" (setsid bash -c 'sleep {marker}' &); echo started"
        )
        assert started.output.startswith("started\n")  # and, as on every runtime, what was stopped:
        assert "[pacore: 3 process(es) the command left running were stopped" in started.output
        wait_until(lambda: not sleeping(marker), 5, what=lambda: f"outlived their command: {sleeping(marker)}")
        slow = box.run(f"setsid sleep {marker} & sleep 60", timeout=1)
        assert slow.timed_out
        wait_until(lambda: not sleeping(marker), 5, what=lambda: f"outlived a timed-out command: {sleeping(marker)}")


def test_local_runtime_needs_a_clone_for_swebench_rows(row, monkeypatch):
    monkeypatch.delenv("PACORE_SWE_REPOS", raising=False)
    swe_row = {k: v for k, v in row.items() if k != "pacore_task_dir"}
    prefix = f"pacore-local-{row['instance_id']}-"
    before = {p.name for p in Path(tempfile.gettempdir()).glob(prefix + "*")}
    with pytest.warns(UnsafeRuntimeWarning), pytest.raises(SandboxError, match="PACORE_SWE_REPOS"):
        open_sandbox(swe_row, runtime="local")
    assert {p.name for p in Path(tempfile.gettempdir()).glob(prefix + "*")} == before  # removed on failure


def test_unknown_runtime_is_one_clear_error(row):
    with pytest.raises(SandboxError, match="unknown sandbox runtime"):
        open_sandbox(row, runtime="vm")  # type: ignore[arg-type]
