"""`--runtime local`: nothing an episode starts outlives pacore, the prompt says where commands really run,
and the flag says what its commands can read."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mock_openai import MockOpenAIServer
from scripted_chat import tool_call
from waits import wait_until

from pacore_agents.swe.local_sandbox import OWNER_FILE, PREFIX, UnsafeRuntimeWarning
from pacore_agents.swe.prompts import task_messages
from pacore_agents.swe.sandbox import open_sandbox
from pacore_agents.swe.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[2]
ROMAN = "pacore__roman-1"


def marker() -> str:
    """A `sleep` duration no other process on this host uses (this test process's pid in it)."""
    return str(800_000 + os.getpid())


def sleeping(mark: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True).stdout.split()


def owned_by(pid: int) -> list[Path]:
    """Local sandbox copies whose owner is process ``pid``."""
    found = []
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            if json.loads((folder / OWNER_FILE).read_text()).get("pacore.pid") == str(pid):
                found.append(folder)
        except (OSError, ValueError):
            continue
    return found


def test_every_process_of_an_episode_ends_when_pacore_is_killed_and_the_next_run_removes_its_copy(tmp_path):
    mark = marker()
    served = {"long": 0}

    def handler(body: dict, attempt: int) -> dict:
        if not any(m["role"] == "tool" for m in body["messages"]) and not served["long"]:
            served["long"] += 1  # the first episode starts detached work and waits; the rerun's submits at once
            command = (
                f"setsid sleep {mark} >/dev/null 2>&1 < /dev/null & nohup sleep {mark} >/dev/null 2>&1 & sleep {mark}"
            )
            return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, "c0")]}
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "nothing to do"}, "c1")]}

    args = [
        sys.executable,
        "-m",
        "pacore_graph.cli",
        "swe",
        "run",
        "--dataset",
        "local",
        "--instances",
        ROMAN,
        "--rounds",
        "0",
        "--runtime",
        "local",
        "--model",
        "scripted",
        "--output",
        str(tmp_path / "run"),
    ]
    with MockOpenAIServer(handler) as server:
        args += ["--base-url", server.base_url]
        killed = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: len(sleeping(mark)) >= 3 or killed.poll() is not None, 120, what="the command started")
            assert killed.poll() is None, killed.stderr.read()[-2000:]
            os.kill(killed.pid, signal.SIGKILL)
            killed.wait(timeout=10)
        finally:
            if killed.poll() is None:
                killed.kill()
                killed.wait()
            killed.stderr.close()
        wait_until(lambda: not sleeping(mark), 20, what=lambda: f"processes outlived pacore: {sleeping(mark)}")
        [left] = owned_by(killed.pid)  # a SIGKILL leaves the copy; the next run's sweep removes it
        rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "removed 1 local sandbox(es) left by a killed run" in rerun.stderr
    summary = json.loads(rerun.stdout.splitlines()[-1])  # the run's JSON summary, the last line of stdout
    assert summary["command"] == "swe run" and summary["exit_code"] == 0 and summary["output"] == str(tmp_path / "run")
    assert summary["counts"]["total"] == summary["counts"]["done"] == 1 and summary["counts"]["failed"] == 0
    assert not left.exists() and owned_by(killed.pid) == []


def test_a_process_that_kills_its_supervisor_is_still_ended_with_its_command():
    [row] = load_tasks("local", instances=[ROMAN])
    mark = marker()
    with pytest.warns(UnsafeRuntimeWarning):
        box = open_sandbox(row, runtime="local")
    with box:
        escaped = box.run(f"setsid sleep {mark} >/dev/null 2>&1 < /dev/null & kill -9 $PPID")
        assert sleeping(mark) == []
        assert any("were stopped" in note for note in escaped.notes), escaped.notes
    assert not Path(box.workdir).exists()


@pytest.mark.parametrize("runtime", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_the_prompt_names_the_folder_and_shell_the_commands_really_get(runtime, request):
    """Issue 28: the local runtime used to say `/testbed` and `bash -lc` while it ran `bash -c` in a temporary
    copy, so a model following the prompt (`cd /testbed`) failed. Every folder the prompt names must exist in
    the sandbox, and the shell it names must be the one commands get."""
    [row] = (
        request.getfixturevalue("local_tasks")(ROMAN) if runtime == "docker" else load_tasks("local", instances=[ROMAN])
    )  # noqa: E501
    system = task_messages(row, runtime=runtime)[0].content
    with pytest.warns(UnsafeRuntimeWarning) if runtime == "local" else contextlib.nullcontext():
        box = open_sandbox(row, runtime=runtime)
    with box:
        for folder in re.findall(r"(?<![\w.])/[\w./-]+\w", system):
            assert box.run(f"cd {folder} && git rev-parse HEAD").output.strip() == row["base_commit"], folder
        login = box.run("shopt -q login_shell && echo login || echo plain").output.strip()
        assert ("`bash -lc`" in system) == (login == "login") and ("`bash -c`" in system) == (login == "plain")
        assert box.run("git rev-parse HEAD").output.strip() == row["base_commit"]  # where a command starts
    if runtime == "local":
        assert "/testbed" not in system and "no network" not in system


def test_the_local_flag_says_its_commands_can_read_pacores_environment():
    """The choice made for issue 24: a command running as the user can read pacore's environment through /proc
    (and the files the keys came from): said beside the flag, in the warning and in the module."""
    shown = subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", "swe", "run", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    help_text = " ".join(shown.stdout.split())
    assert (
        "local (UNSAFE: commands run on this host as you, and can read your files and pacore's environment, "
        "API keys included, through /proc)" in help_text
    )
