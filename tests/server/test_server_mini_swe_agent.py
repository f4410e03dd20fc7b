"""mini-swe-agent (PyPI, through litellm) runs through the endpoint on a local SWE task: PaCoRe per model call.

The example script ``examples/mini_swe_agent.py`` is run as a user would run it, in a process of its own,
against the endpoint; mini-swe-agent's local environment works in a temporary copy of the task's
repository (no Docker). The upstream is scripted: its tool call is a function of how far the conversation
got (how many tool results it holds), so K trajectories and the synthesis agree and the episode is
reproducible. The upstream's log must show the PaCoRe rounds of every agent step, and the usage the
agent recorded for each step must equal the upstream completion tokens of that step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from endpoint import endpoint, is_synthesis

from pacore_agents.swe.images import commit_repo, copy_repo
from pacore_agents.swe.tasks import load_tasks
from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, chat_model
from pacore_graph.server import BackgroundServer, create_app

ROOT = Path(__file__).resolve().parents[2]
(TASK,) = load_tasks("local", instances=["pacore__roman-1"])
STEPS = [  # what a competent agent does: fix, check, write the patch, submit it (mini-swe-agent's protocol)
    "git apply <<'PATCH'\n" + TASK["patch"] + "PATCH",
    "python3 -c 'from roman import to_roman; print(to_roman(1994))'",
    "git diff -- roman/numerals.py > patch.txt",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt",
]


def tool_results(body: dict) -> int:
    return sum(1 for message in body["messages"] if message["role"] == "tool")


def step_tokens(body: dict) -> int:
    return 40 + 3 * tool_results(body) + (60 if is_synthesis(body) else len(json.dumps(body["messages"])) % 11)


def scripted_agent(body: dict, attempt: int) -> dict:
    step = tool_results(body)
    arguments = json.dumps({"command": STEPS[min(step, len(STEPS) - 1)]})
    call = {"id": f"call_{step}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    return {
        "content": f"THOUGHT: step {step + 1} of the plan.",
        "tool_calls": [call],
        "finish_reason": "tool_calls",
        "usage": {"prompt_tokens": 300, "completion_tokens": step_tokens(body), "total_tokens": 0},
    }


def run_example(base_url: str, model: str, tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    """examples/mini_swe_agent.py in a process of its own, with mini-swe-agent's config folder in tmp_path."""
    environment = {k: v for k, v in os.environ.items() if k != "MSWEA_SILENT_STARTUP"}  # as a user runs it
    environment["MSWEA_GLOBAL_CONFIG_DIR"] = str(tmp_path / "mswea")
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "mini_swe_agent.py"),
            "--endpoint",
            base_url,
            "--model",
            model,
            *options,
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_mini_swe_agent_through_the_endpoint_solves_a_local_task(tmp_path):
    trajectory = tmp_path / "trajectory.json"
    with endpoint(scripted_agent, rounds=[4]) as (upstream, server):
        run = run_example(
            server.base_url,
            "pacore-rounds-3/mock-model",
            tmp_path,
            "--task",
            TASK["instance_id"],
            "--trajectory",
            str(trajectory),
        )
        requests = list(upstream.requests)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["exit_status"] == "Submitted" and summary["model_calls"] == len(STEPS)

    # The upstream saw PaCoRe per agent step: 3 trajectories on the agent's own messages, then one synthesis.
    by_step = defaultdict(list)
    for body in requests:
        by_step[tool_results(body)].append(body)
    assert sorted(by_step) == list(range(len(STEPS)))
    for bodies in by_step.values():
        assert [is_synthesis(body) for body in bodies] == [False, False, False, True]
        assert all(body["tools"][0]["function"]["name"] == "bash" for body in bodies)
    # The usage mini-swe-agent got back for each step is that step's upstream completion tokens.
    assert [usage["completion_tokens"] for usage in summary["usage"]] == [
        sum(step_tokens(body) for body in by_step[step]) for step in range(len(STEPS))
    ]
    assert [r["k"] for r in summary["usage"][0]["pacore"]["rounds"]] == [3, 1]
    saved = json.loads(trajectory.read_text())
    assert saved["info"]["exit_status"] == "Submitted"
    assert "MCMXCIV" in json.dumps(saved["messages"])  # the agent's check ran on the fixed code

    # The submitted patch resolves the task: its hidden tests pass on a fresh copy with it applied.
    repo = tmp_path / "fresh"
    repo.mkdir()
    copy_repo(Path(TASK["pacore_task_dir"]) / "repo", repo)
    assert commit_repo(repo) == TASK["base_commit"]
    for patch in (summary["submission"], TASK["test_patch"]):
        subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=repo, check=True)
    failing_before = json.loads(TASK["FAIL_TO_PASS"])
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *failing_before],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout[-2000:]


def test_mini_swe_agent_in_front_of_the_emulator_accounts_every_call(tmp_path):
    """The serving emulator answers in prose, never with a tool call: mini-swe-agent rejects each reply as a
    format error and gives up after three. Each of those calls still ran PaCoRe, and the summary counts them."""
    with Emulator(EmulatorConfig(ttft=0.01, token_delay=0.0005, output_tokens=(20, 60))) as emu:
        chat = chat_model(base_url=emu.base_url, model=emu.config.model)
        with BackgroundServer(create_app(chat, PaCoReConfig(rounds=[2]))) as server:
            run = run_example(server.base_url, f"pacore-low/{emu.config.model}", tmp_path, "--step-limit", "10")
        stats = emu.stats()
    summary = json.loads(run.stdout)
    assert run.returncode == 1 and summary["exit_status"] == "RepeatedFormatError"
    assert summary["model_calls"] == 3 and stats["requests"] == 3 * (4 + 1)  # pacore-low: [4] per call
    assert summary["completion_tokens"] == stats["tokens_out"]


def test_a_conversation_outgrowing_the_context_stops_the_example_in_one_line(tmp_path):
    """The upstream's context (1024 tokens, vLLM's HTTP 400 beyond it) is smaller than mini-swe-agent's first prompt:
    the endpoint passes the 400 on, litellm names it a context-window error, and the example ends with its JSON
    summary and one line on stderr saying why, not a traceback."""
    with Emulator(EmulatorConfig(ttft=0.01, token_delay=0.0005, output_tokens=20, max_model_len=1024)) as emu:
        chat = chat_model(base_url=emu.base_url, model=emu.config.model)
        with BackgroundServer(create_app(chat, PaCoReConfig(rounds=[2]))) as server:
            run = run_example(server.base_url, f"pacore-low/{emu.config.model}", tmp_path, "--step-limit", "3")
    assert run.returncode == 1
    summary = json.loads(run.stdout)
    assert summary["exit_status"] == "ContextWindowExceededError" and summary["model_calls"] == 0
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("mini_swe_agent: ")]
    assert line.startswith("mini_swe_agent: the episode stopped: ContextWindowExceededError") and "context" in line
