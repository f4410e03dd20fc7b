"""PaCoRe over repair episodes: references are patches, broken episodes are dropped, and the CLI round trip.

The fast tests use in-memory sandboxes and a fake model whose reply is a function of the conversation.
The docker test runs `pacore swe run` and `pacore swe eval` as a user would, against a scripted OpenAI
server on loopback that answers with tool calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fakes import PromptFunctionChatModel
from langchain_core.messages import AIMessage, BaseMessage
from scripted_chat import tool_call

from pacore_agents.swe.episodes import InstanceOutcome, SweSolver, cap_patch, episode_conclusion
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_agents.swe.run import PREDICTIONS_FILE, run_instances, swe_folder, trajectory_path
from pacore_agents.swe.sandbox import CommandResult
from pacore_graph import PaCoReConfig
from pacore_graph.extend import SettingsMismatch
from pacore_graph.synthesis.prompt import message_text

ROOT = Path(__file__).resolve().parents[2]
ROW = {"instance_id": "fake__task-1", "repo": "fake/task", "problem_statement": "add() subtracts", "base_commit": "0"}


class SerialSandbox:
    """`whoami` answers `sandbox-N` (N in opening order); `fix X` makes the diff mention X."""

    def __init__(self, serial: int, crash: bool):
        self.serial, self.crash = serial, crash
        self.workdir = "/fake"
        self.fix: str | None = None
        self.closed = False

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        if self.crash:
            raise RuntimeError(f"sandbox-{self.serial} lost its container")
        if command == "whoami":
            return CommandResult(exit_code=0, output=f"sandbox-{self.serial}\n", timed_out=False)
        if command.startswith("fix "):
            self.fix = command[4:]
        return CommandResult(exit_code=0, output="", timed_out=False)

    def diff(self) -> str:
        return f"diff --git a/m.py b/m.py\n+fix by {self.fix}\n" if self.fix else ""

    def close(self) -> None:
        self.closed = True


class Sandboxes:
    def __init__(self, crash: set[int] = frozenset()):
        self.crash = crash
        self.opened: list[SerialSandbox] = []
        self.lock = threading.Lock()

    def __call__(self, row: dict) -> SerialSandbox:
        with self.lock:
            sandbox = SerialSandbox(len(self.opened), len(self.opened) in self.crash)
            self.opened.append(sandbox)
        return sandbox


def block(command: str, thought: str = "") -> AIMessage:
    return AIMessage(content=f"{thought}\n```bash\n{command}\n```")


def references_in(messages: list[BaseMessage]) -> list[str]:
    return re.findall(r"fix by (\S+)", message_text(messages[1]))


def explorer_reply(messages: list[BaseMessage], *, fix_in_round_one: bool = True) -> AIMessage:
    """Round 1: ask who I am, then fix under that name. Synthesis: fix as `merged-<refs>`."""
    seen = [message_text(m) for m in messages[2:] if not isinstance(m, AIMessage)]
    refs = references_in(messages)
    if refs:
        return block(f"fix merged-{'+'.join(sorted(refs))}") if not seen else block("submit", "merged")
    if not seen:
        return block("whoami")
    if len(seen) == 1:
        name = seen[0].split("\n")[1]
        return block(f"fix {name}") if fix_in_round_one else block("submit", "found nothing")
    return block("submit", "fixed it")


def run(rows: list[dict], sandboxes: Sandboxes, output: Path, rounds=(2,), workers: int = 1):
    """`run_instances` as the CLI calls it, with the fake model and in-memory sandboxes."""
    config = PaCoReConfig(rounds=list(rounds))
    solver = SweSolver(PromptFunctionChatModel(reply=explorer_reply), config, RepairSettings(), open_sandbox=sandboxes)
    folder = swe_folder(output, "fake", config, RepairSettings(), progress=False)
    try:
        return asyncio.run(run_instances(rows, solver, folder, workers=workers))
    finally:
        solver.close()


def solve(reply, sandboxes: Sandboxes, output: Path, rounds=(2,)) -> InstanceOutcome:
    """One instance through a run folder: what its trajectory file says."""
    config = PaCoReConfig(rounds=list(rounds))
    solver = SweSolver(PromptFunctionChatModel(reply=reply), config, RepairSettings(), open_sandbox=sandboxes)
    try:
        asyncio.run(run_instances([ROW], solver, swe_folder(output, "fake", config, RepairSettings(), progress=False)))
    finally:
        solver.close()
    return InstanceOutcome.model_validate_json(trajectory_path(output, ROW["instance_id"]).read_text())


def test_the_synthesis_episode_sees_both_candidate_patches(tmp_path):
    sandboxes = Sandboxes()
    outcome = solve(explorer_reply, sandboxes, tmp_path)
    assert outcome.error is None and outcome.completed
    assert outcome.model_patch == "diff --git a/m.py b/m.py\n+fix by merged-sandbox-0+sandbox-1\n"
    assert [(e["round_index"], e["index"], e["stop_reason"]) for e in outcome.episodes] == [
        (0, 0, "submitted"),
        (0, 1, "submitted"),
        (1, 0, "submitted"),
    ]
    final_prompt = outcome.episodes[-1]["messages"][1]["content"]
    assert "Reference Responses" in final_prompt and "add() subtracts" in final_prompt
    assert "+fix by sandbox-0" in final_prompt and "+fix by sandbox-1" in final_prompt
    assert "Note: fixed it" in final_prompt
    assert outcome.rounds[0]["k"] == 2 and len(outcome.rounds[0]["reference_order"]) == 2
    assert all(s.closed for s in sandboxes.opened) and len(sandboxes.opened) == 3


def test_a_crashed_episode_is_recorded_but_never_passed_on(tmp_path):
    sandboxes = Sandboxes(crash={1})
    outcome = solve(explorer_reply, sandboxes, tmp_path)
    crashed = [e for e in outcome.episodes if e["stop_reason"] == "error"]
    assert len(crashed) == 1 and "lost its container" in crashed[0]["error"]
    final_prompt = outcome.episodes[-1]["messages"][1]["content"]
    assert final_prompt.count("Reference ") == 2  # "Reference Responses:" + exactly one "Reference 1:"
    assert "Reference 1:" in final_prompt and "Reference 2:" not in final_prompt
    assert outcome.model_patch.startswith("diff --git") and "merged-sandbox-0" in outcome.model_patch
    assert all(s.closed for s in sandboxes.opened)


def test_episodes_without_a_patch_end_the_run_with_an_empty_prediction_and_the_reason(tmp_path):
    outcome = solve(lambda messages: explorer_reply(messages, fix_in_round_one=False), Sandboxes(), tmp_path)
    assert outcome.completed and outcome.model_patch == ""
    assert "none of its 2 trajectories produced a usable conclusion" in outcome.error
    assert len(outcome.episodes) == 2 and all(e["patch"] == "" for e in outcome.episodes)


def test_the_compacted_episode_is_its_capped_patch_and_note():
    patch = "".join(f"+line {n}\n" for n in range(1000))
    text = episode_conclusion({"patch": patch, "note": "why", "stop_reason": "submitted"}, cap=100)
    assert text.startswith("Patch:\n```diff\n+line 0\n") and text.endswith("```\n\nNote: why")
    assert re.search(r"\[\.\.\. patch cut here: \d+ more characters not shown \.\.\.\]", text)
    assert len(cap_patch(patch, 100)) < 200
    assert episode_conclusion({"patch": "", "note": "nothing", "stop_reason": "submitted"}) == ""
    assert episode_conclusion({"patch": patch, "stop_reason": "error"}) == ""


def test_run_writes_predictions_and_trajectories_and_resumes(tmp_path):
    rows = [ROW, {**ROW, "instance_id": "fake__task-2"}]
    sandboxes = Sandboxes()
    summary = run(rows, sandboxes, tmp_path, rounds=(1,), workers=2)
    assert (summary.written, summary.skipped, summary.failed) == (2, 0, {})
    lines = [json.loads(line) for line in (tmp_path / PREDICTIONS_FILE).read_text().splitlines()]
    assert sorted(p["instance_id"] for p in lines) == ["fake__task-1", "fake__task-2"]
    assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in lines)
    assert all(p["model_patch"].startswith("diff --git") for p in lines), "both instances predicted a patch"
    trajectory = json.loads(trajectory_path(tmp_path, "fake__task-1").read_text())
    assert [e["round_index"] for e in trajectory["episodes"]] == [0, 1]
    assert trajectory["episodes"][0]["messages"][2]["content"].strip().endswith("```")
    opened = len(sandboxes.opened)
    again = run(rows, sandboxes, tmp_path, rounds=(1,), workers=2)
    assert (again.skipped, again.written) == (2, 0) and len(sandboxes.opened) == opened


def test_an_instance_whose_episodes_all_crash_gets_no_prediction_and_is_retried(tmp_path):
    sandboxes = Sandboxes(crash={0, 1})
    summary = run([ROW], sandboxes, tmp_path)
    assert list(summary.failed) == [ROW["instance_id"]]
    assert not (tmp_path / PREDICTIONS_FILE).exists() or not (tmp_path / PREDICTIONS_FILE).read_text().strip()
    trajectory = json.loads(trajectory_path(tmp_path, ROW["instance_id"]).read_text())
    assert trajectory["completed"] is False and "lost its container" in trajectory["error"]
    retried = run([ROW], sandboxes, tmp_path)  # the sandboxes work now: the instance is tried again
    assert (retried.written, retried.failed) == (1, {}) and len(sandboxes.opened) == 5
    assert json.loads((tmp_path / PREDICTIONS_FILE).read_text())["model_patch"].startswith("diff --git")


def test_a_folder_made_with_other_episode_settings_is_refused_in_one_line(tmp_path):
    config = PaCoReConfig(rounds=[2])
    swe_folder(tmp_path, "fake", config, RepairSettings(step_limit=30)).claim().release()
    with pytest.raises(SettingsMismatch) as refused:
        swe_folder(tmp_path, "fake", config, RepairSettings(step_limit=5)).claim()
    assert "episode.step_limit: folder has 30, this run 5" in str(refused.value) and "\n" not in str(refused.value)
    swe_folder(tmp_path, "fake", config, RepairSettings(threads=2)).claim().release()  # threads change nothing


# ------------------------------------------------------------------------------------------- docker, CLI

ROMAN = "pacore__roman-1"


def pacore_script(gold_patch: str):
    """Scripted tool-calling model for PaCoRe. Its reply is a function of the conversation.

    Round 1: read a random id in the sandbox, apply the fix plus a comment carrying that id (so the two
    candidate patches differ), submit. Synthesis (the task message holds Reference Responses): apply
    the plain fix and submit.
    """

    def handler(body: dict, attempt: int) -> dict:
        messages = body["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        synthesis = "Reference Responses" in messages[1]["content"]
        if synthesis:
            if not results:
                command = f"git apply <<'PATCH'\n{gold_patch}PATCH"
                return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, "s0")]}
            return {"content": "", "tool_calls": [tool_call("submit", {"note": "kept the common fix"}, "s1")]}
        if not results:
            command = "cat /proc/sys/kernel/random/uuid"
            return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, "r0")]}
        if len(results) == 1:
            tag = results[0]["content"].split("\n")[1].strip()[:8]
            command = f"git apply <<'PATCH'\n{gold_patch}PATCH\necho '# attempt {tag}' >> roman/__init__.py"
            return {"content": "", "tool_calls": [tool_call("bash", {"command": command}, "r1")]}
        return {"content": "", "tool_calls": [tool_call("submit", {"note": "subtractive pairs"}, "r2")]}

    return handler


def sandbox_containers(full: bool = False) -> list[str]:
    """Ids of every container (any state) a pacore sandbox created, still on the daemon."""
    command = ["docker", "ps", "-aq", "--filter", "label=pacore.sandbox", *(["--no-trunc"] if full else [])]
    return subprocess.run(command, capture_output=True, text=True).stdout.split()


def pacore(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


@pytest.mark.docker
def test_cli_run_with_two_candidates_then_eval_resolves_and_leaves_no_containers(mock_server, tmp_path):
    from pacore_agents.swe.tasks import load_tasks

    assert subprocess.run(["docker", "info"], capture_output=True).returncode == 0, "run scripts/docker-setup.sh"
    row = load_tasks("local", instances=[ROMAN])[0]
    out = tmp_path / "run"
    with mock_server(pacore_script(row["patch"])) as server:
        args = [
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
            "docker",
            "--output",
            str(out),
        ]
        done = pacore(*args)
        assert done.returncode == 0, done.stderr[-3000:]
        requests = len(server.requests)
        again = pacore(*args)  # resumes: nothing left to do, no model call
        assert again.returncode == 0 and "1 already done" in again.stderr, again.stderr[-2000:]
        assert len(server.requests) == requests

    (prediction,) = [json.loads(line) for line in (out / PREDICTIONS_FILE).read_text().splitlines()]
    assert prediction == {"instance_id": ROMAN, "model_name_or_path": "scripted", "model_patch": row["patch"]}
    trajectory = json.loads(trajectory_path(out, ROMAN).read_text())
    first, second, final = trajectory["episodes"]
    assert (first["round_index"], second["round_index"], final["round_index"]) == (0, 0, 1)
    tags = [re.search(r"# attempt (\w+)", e["patch"]).group(1) for e in (first, second)]
    assert tags[0] != tags[1]
    synthesis_prompt = final["messages"][1]["content"]
    assert all(f"+# attempt {tag}" in synthesis_prompt for tag in tags), "the synthesis saw both candidates"
    assert final["messages"][2]["tool_calls"][0]["name"] == "bash" and final["stop_reason"] == "submitted"
    assert all(e["completion_tokens"] > 0 for e in trajectory["episodes"])
    assert "test_subtractive" not in json.dumps(server.requests)
    containers = [e["sandbox"]["id"] for e in trajectory["episodes"]]
    assert len(set(containers)) == 3 and all(containers), "three episodes, three fresh containers"
    assert not set(containers) & set(sandbox_containers(full=True)), "episode containers were left behind"

    graded = pacore(
        "swe",
        "eval",
        "--dataset",
        "local",
        "--instances",
        ROMAN,
        "--predictions",
        str(out / PREDICTIONS_FILE),
        "--run-id",
        "cli",
        "--output",
        str(tmp_path / "eval"),
    )
    assert graded.returncode == 0, graded.stderr[-3000:]
    summary = json.loads((tmp_path / "eval" / "cli" / "summary.json").read_text())
    assert summary["resolved_ids"] == [ROMAN]
