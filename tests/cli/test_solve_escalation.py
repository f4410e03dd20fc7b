"""``pacore solve --output F`` run again with a larger preset continues the run in F, sending only what it lacks:
real subprocesses against the serving emulator, counted on the emulator's own request counter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph.cli import main as pacore_main

PROBLEM = "How many ordered pairs (a, b) of positive integers satisfy a * b = 12?"


@pytest.fixture(scope="module")
def emulator():
    with Emulator(EmulatorConfig(ttft=0.0, token_delay=0.0, output_tokens=(20, 60))) as emu:
        yield emu


def solve(emulator: Emulator, output: str, *flags: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """One ``pacore solve`` process, and how many requests the emulator received meanwhile."""
    before = emulator.stats()["requests"]
    command = [sys.executable, "-m", "pacore_graph.cli", "solve", PROBLEM, "--base-url", emulator.base_url]
    done = subprocess.run([*command, "--output", output, *flags], capture_output=True, text=True, timeout=120)
    return done, emulator.stats()["requests"] - before


def test_solve_again_at_medium_sends_12_plus_1_and_says_what_it_reused(emulator, tmp_path, capsys):
    output = str(tmp_path / "run")
    low, low_sent = solve(emulator, output, "--preset", "low")
    assert low.returncode == 0 and low_sent == 4 + 1
    medium, medium_sent = solve(emulator, output, "--preset", "medium")
    assert medium.returncode == 0, medium.stderr
    assert medium_sent == 12 + 1
    assert "ran rounds [4]: continuing at rounds [16]" in medium.stderr
    assert "pacore: round 1: K=16" in medium.stderr and "4 reused" in medium.stderr
    assert "pacore: reused 4 earlier trajectories" in medium.stderr and "sent 13" in medium.stderr
    summary = json.loads(medium.stdout.strip().splitlines()[-1])
    assert summary["exit_code"] == 0 and summary["counts"]["reused_trajectories"] == 4
    assert summary["counts"]["trajectories"] == 17

    again, again_sent = solve(emulator, output, "--preset", "medium")  # answered: read back, nothing sent
    assert again.returncode == 0 and again_sent == 0 and "answered before" in again.stderr

    assert pacore_main(["show", output]) == 0
    shown = capsys.readouterr().out
    assert "round 1: K=16" in shown and "4 reused" in shown and "(4 reused from an earlier run, 13 sent)" in shown


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--preset", "low"], "holds results of rounds [16]; rounds [4] is smaller"),
        (["--preset", "medium", "--max-tokens", "50"], "holds results made with other settings (max_tokens"),
        (["--preset", "high", "--model", "another-model"], "holds results made with other settings (model"),
    ],
)
def test_a_smaller_schedule_or_another_model_or_sampling_is_refused_before_anything_is_sent(
    emulator, tmp_path, flags, message
):
    output = str(tmp_path / "run")
    assert solve(emulator, output, "--preset", "low")[0].returncode == 0
    assert solve(emulator, output, "--preset", "medium")[0].returncode == 0
    refused, sent = solve(emulator, output, *flags)
    assert refused.returncode == 2 and sent == 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pacore: error: ") and message in lines[0]


def test_an_earlier_row_that_is_no_result_is_refused_before_a_request(emulator, tmp_path):
    output = tmp_path / "run"
    assert solve(emulator, str(output), "--preset", "low")[0].returncode == 0
    (output / "results.jsonl").write_text(json.dumps({"id": "problem", "answer": "391"}) + "\n")  # not a run's row
    refused, sent = solve(emulator, str(output), "--preset", "medium")
    assert refused.returncode == 2 and sent == 0
    lines = refused.stderr.strip().splitlines()
    assert lines[-1].startswith("pacore: error: problem 'problem' of ") and "not a PaCoRe result" in lines[-1]
