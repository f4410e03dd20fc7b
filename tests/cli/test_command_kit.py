"""Every ``pacore`` command reads, fails and reports the same way (the command kit, issue 28):

- a refused input (bad argument, value, path or file) is one line on stderr, ``pacore: error: ...``, exit status
  2, nothing on stdout and nothing written;
- a run that fails is exit status 1, its last stderr line such a line, and stdout still ends with the run's JSON
  summary, whose ``error`` says the same;
- a run command's last stdout line is its JSON summary: ``command``, ``exit_code``, ``output``, ``counts``;
- an option's old spelling still works and is left out of ``--help``;
- a plugin that fails to load is named in one line; the other commands still work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from multichallenge_mock import MockServer, write_data

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph.cli import build_parser, main
from pacore_graph.extend import FolderLock, free_port

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MATH = str(FIXTURES / "math" / "aime_2025.jsonl")
CHATS = str(FIXTURES / "multichallenge" / "benchmark_questions.jsonl")
ROMAN = "pacore__roman-1"  # a local SWE task


def _run(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), [line for line in captured.err.splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _no_server_from_the_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


# --------------------------------------------------------------------------------------------- refused inputs

REFUSED = [  # every command, each given one bad value; what its one line names
    (["solve", "q", "--max-concurrency", "0"], "invalid max_concurrency: Input should be greater than or equal to 1"),
    (["solve", "q", "--max-tokens", "x"], "argument --max-tokens: invalid int value: 'x'"),
    (["solve", "--messages-file", "{tmp}/nope.json"], "cannot read --messages-file {tmp}/nope.json"),
    (["serve", "--port", "0"], "--port 0 is not a TCP port (1-65535)"),
    (["serve-local", "--port", "70000"], "--port 70000 is not a TCP port"),
    (["serve-vllm", "--replicas", "0", "m"], "--replicas must be at least 1, got 0"),
    (["bench", "math", "--data", "{tmp}/nope.jsonl", "--output", "{tmp}/out"], "{tmp}/nope.jsonl does not exist"),
    (["bench", "math", "grade", "--data", MATH], "grade needs --predictions FILE"),
    (
        [
            "bench",
            "math",
            "export-train",
            "--data",
            MATH,
            "--min-message-accuracy",
            "0.5",
            "--max-message-accuracy",
            "0.2",
            "--output",
            "{tmp}/out",
        ],
        "--min-message-accuracy 0.5 must be below --max-message-accuracy 0.2",
    ),
    (
        ["bench", "multichallenge", "--data", CHATS, "--samples", "0", "--output", "{tmp}/out"],
        "--samples must be at least 1",
    ),
    (["bench", "overhead", "--problems", "0", "--output", "{tmp}/out"], "invalid problems"),
    (["bench", "faults", "--problems", "0"], "invalid problems"),
    (["bench", "instructions", "--problems", "4,2"], "fewer than the large one, got 4,2"),
    (["bench", "instructions", "--baseline", "{tmp}"], "--baseline {tmp}: not a pacore-graph checkout"),
    (["bench", "replicas", "--replicas", "1"], "invalid replicas"),
    (["bench", "coordination", "--methods", "nope"], "unknown methods ['nope']"),
    (["bench", "nosuch"], "argument BENCHMARK: invalid choice: 'nosuch'"),
    (["swe", "run", "--dataset", "{tmp}/nope.jsonl", "--output", "{tmp}/out"], "{tmp}/nope.jsonl does not exist"),
    (
        [
            "swe",
            "eval",
            "--dataset",
            "local",
            "--predictions",
            "{tmp}/nope.jsonl",
            "--run-id",
            "r",
            "--output",
            "{tmp}/out",
        ],
        "{tmp}/nope.jsonl",
    ),
    (
        ["swe", "images", "build", "--dataset", "local", "--instances", ROMAN, "--repos", "{tmp}/nope"],
        "--repos {tmp}/nope: not a folder",
    ),
    (["nosuch"], "argument COMMAND: invalid choice: 'nosuch'"),
]


@pytest.mark.parametrize(("argv", "named"), REFUSED, ids=[" ".join(argv[:3]) for argv, _ in REFUSED])
def test_a_refused_input_is_one_line_exit_2_and_nothing_else(capsys, tmp_path, argv, named):
    code, out, err = _run(capsys, *[arg.format(tmp=tmp_path) for arg in argv])
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("pacore: error: ") and named.format(tmp=tmp_path) in err[0], err
    assert out == []  # nothing ran: no summary
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["bench", "nosuch"], ["serve", "--port", "0"], ["swe", "run", "--output", "x"]])
def test_the_process_exits_2_with_the_same_one_line(argv):
    done = subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("pacore: error: ") and done.stderr.count("\n") == 1, done.stderr


# ------------------------------------------------------------------------------------------------ old spellings

ALIASES = [  # (command, old spelling, canonical option, its dest)
    (["bench", "math"], "--max-inflight", "--max-concurrency", "max_concurrency"),
    (["bench", "overhead"], "--concurrency", "--max-concurrency", "max_concurrency"),
    (["bench", "multichallenge"], "--concurrency", "--workers", "workers"),
    (["bench", "coordination"], "--schedule", "--rounds", "rounds"),
]


@pytest.mark.parametrize(("command", "old", "canonical", "dest"), ALIASES)
def test_an_old_spelling_still_works_and_is_not_shown(capsys, command, old, canonical, dest):
    args = build_parser().parse_args([*command, old, "7"])
    assert getattr(args, dest) == "7" if dest == "rounds" else getattr(args, dest) == 7
    assert main([*command, "--help"]) == 0
    shown = capsys.readouterr().out
    assert canonical in shown and old not in shown.replace(canonical, "")


def test_overheads_old_schedules_are_rounds(capsys):
    args = build_parser().parse_args(["bench", "overhead", "--schedules", "4;32,4"])
    assert args.rounds == ["4", "32,4"]
    code, _, err = _run(capsys, "bench", "overhead", "--schedules", "4;x")
    assert code == 2 and err[0].startswith("pacore: error: argument --schedules: schedules look like")


# ------------------------------------------------------------------------------------------------ failed runs


def _closed() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: the server check fails at once


FAILED = [  # a run that cannot go on, each of its own kind; what its error says
    (
        ["bench", "math", "--data", MATH, "--limit", "1", "--base-url", "{closed}", "--output", "{tmp}/out"],
        "cannot reach the model server",
    ),
    (
        [
            "bench",
            "math",
            "export-train",
            "--data",
            MATH,
            "--limit",
            "1",
            "--pool",
            "2",
            "--base-url",
            "{closed}",
            "--output",
            "{tmp}/out",
        ],
        "cannot reach the model server",
    ),
    (
        ["bench", "multichallenge", "--data", CHATS, "--limit", "1", "--base-url", "{closed}", "--output", "{tmp}/out"],
        "cannot reach the model server",
    ),
    (
        ["swe", "run", "--dataset", "local", "--instances", ROMAN, "--base-url", "{closed}", "--output", "{tmp}/out"],
        "cannot reach the model server",
    ),
    (
        [
            "swe",
            "eval",
            "--dataset",
            "local",
            "--instances",
            ROMAN,
            "--predictions",
            "gold",
            "--run-id",
            "r",
            "--output",
            "{tmp}/held",
        ],
        "is in use by another run",
    ),
]


@pytest.mark.parametrize(("argv", "named"), FAILED, ids=[" ".join(argv[:3]) for argv, _ in FAILED])
def test_a_failed_run_is_one_line_exit_1_and_its_summary_says_why(capsys, tmp_path, argv, named):
    (tmp_path / "held").mkdir()
    with FolderLock(tmp_path / "held"):  # another evaluation writing there
        code, out, err = _run(capsys, *[arg.format(tmp=tmp_path, closed=_closed()) for arg in argv])
    assert code == 1, err
    errors = [line for line in err if line.startswith("pacore: error: ")]
    assert errors == [err[-1]] and named in err[-1], err  # one error line, the last (after warnings, progress)
    summary = json.loads(out[-1])
    command = " ".join(argv[:3]) if argv[:3] == ["bench", "math", "export-train"] else " ".join(argv[:2])
    assert summary["command"] == command and summary["exit_code"] == 1
    assert summary["error"] == err[-1].removeprefix("pacore: error: ")


def test_solve_whose_every_trajectory_is_refused_fails_with_exit_1(capsys, tmp_path, mock_server):
    with mock_server(lambda body, attempt: (400, "bad request")) as server:
        code, out, err = _run(
            capsys, "solve", "q", "--rounds", "2", "--base-url", server.base_url, "--model", server.model
        )
    assert code == 1 and err[-1].startswith("pacore: error: round 1: none of its 2 trajectories")
    assert json.loads(out[-1]) == {
        "command": "solve",
        "exit_code": 1,
        "output": None,
        "counts": {},
        "error": err[-1].removeprefix("pacore: error: "),
    }


# ------------------------------------------------------------------------------------------------ summaries

ENVELOPE = ("command", "exit_code", "output", "counts")


def _summary(out: list[str], command: str, code: int) -> dict:
    summary = json.loads(out[-1])
    assert list(summary)[: len(ENVELOPE)] == list(ENVELOPE)
    assert summary["command"] == command and summary["exit_code"] == code
    return summary


def test_solve_and_the_math_commands_end_with_their_summary(capsys, tmp_path, mock_server):
    with mock_server(lambda body, attempt: {"content": "\\boxed{70}"}) as server:
        code, out, _ = _run(capsys, "solve", "q", "--rounds", "2", "--base-url", server.base_url)
    assert code == 0 and out[0] == "\\boxed{70}"
    assert _summary(out, "solve", 0)["counts"] == {
        "total": 1,
        "done": 1,
        "failed": 0,
        "trajectories": 3,
        "failed_trajectories": 0,
    }

    with Emulator(EmulatorConfig(ttft=0.01, output_tokens=8)) as emulator:
        code, out, _ = _run(
            capsys,
            "bench",
            "math",
            "--data",
            MATH,
            "--limit",
            "1",
            "--rounds",
            "2",
            "--methods",
            "single,pacore",
            "--base-url",
            emulator.base_url,
            "--no-progress",
            "--output",
            tmp_path / "math",
        )
        summary = _summary(out, "bench math", code)
        assert code == 0 and summary["output"] == str(tmp_path / "math")
        assert summary["counts"]["total"] == 1 and summary["counts"]["failed"] == 0
        code, out, _ = _run(
            capsys,
            "bench",
            "math",
            "export-train",
            "--data",
            MATH,
            "--limit",
            "1",
            "--pool",
            "2",
            "--base-url",
            emulator.base_url,
            "--no-progress",
            "--output",
            tmp_path / "train",
        )
        summary = _summary(out, "bench math export-train", code)
        assert code == 0 and summary["counts"]["total"] == 1 and Path(summary["export"]).is_file()

    predictions = tmp_path / "p.jsonl"
    predictions.write_text(json.dumps({"id": "aime_2025_I_1", "response": "\\boxed{70}"}) + "\n")
    code, out, _ = _run(capsys, "bench", "math", "grade", "--data", MATH, "--predictions", predictions)
    summary = _summary(out, "bench math grade", 0)
    assert code == 0 and summary["counts"]["correct"] == 1 and summary["output"].endswith("p.verdicts.jsonl")


def test_multichallenge_ends_with_its_summary(capsys, tmp_path):
    data = tmp_path / "data.jsonl"
    write_data(data, 2)
    with MockServer() as server:
        code, out, _ = _run(
            capsys,
            "bench",
            "multichallenge",
            "--data",
            data,
            "--base-url",
            server.url,
            "--rounds",
            "0",
            "--max-tokens",
            "16",
            "--output",
            tmp_path / "out",
        )
    summary = _summary(out, "bench multichallenge", code)
    assert code == 0 and summary["counts"]["total"] == summary["counts"]["done"] == 2


@pytest.mark.parametrize(
    "argv",
    [
        [
            "bench",
            "coordination",
            "--problems",
            "2",
            "--rounds",
            "2",
            "--methods",
            "paper,early_stop",
            "--token-delay",
            "0.0005",
            "--output-tokens",
            "20-40",
        ],
        ["bench", "faults", "--quick", "--problems", "2"],
        [
            "bench",
            "replicas",
            "--quick",
            "--problems",
            "1",
            "--chat-problems",
            "0",
            "--one-at-a-time",
            "0",
            "--no-kill",
            "--replicas",
            "2",
        ],
    ],
    ids=["coordination", "faults", "replicas"],
)
def test_the_performance_benchmarks_end_with_their_summary(capsys, argv):
    """The targets of a run this small may be missed (exit status 1): the summary says the same status, and
    why, as the run's error line does."""
    code, out, err = _run(capsys, *argv)
    summary = _summary(out, " ".join(argv[:2]), code)
    assert code in (0, 1) and summary["counts"]
    if code == 1:
        assert err[-1] == f"pacore: error: {summary['error']}"
    else:
        assert "error" not in summary and not any(line.startswith("pacore: error: ") for line in err)


# ------------------------------------------------------------------------------------------------ plugins


def test_a_plugin_that_fails_to_load_is_named_and_the_others_still_work(capsys, monkeypatch):
    import pacore_graph.cli

    misspelled = EntryPoint(name="bench", value="pacore_benchmarks.clii:register", group="pacore.commands")
    swe = EntryPoint(name="swe", value="pacore_agents.cli:register", group="pacore.commands")
    monkeypatch.setattr(pacore_graph.cli, "entry_points", lambda group: [misspelled, swe])
    code, out, err = _run(capsys, "bench", "math")
    assert code == 2 and out == []
    assert err[0] == (
        "pacore: warning: plugin 'bench' (pacore_benchmarks.clii:register) failed to load, its commands "
        "are not offered: ModuleNotFoundError: No module named 'pacore_benchmarks.clii'"
    )
    assert err[1].startswith("pacore: error: argument COMMAND: invalid choice: 'bench'") and len(err) == 2
    assert main(["swe", "run", "--help"]) == 0


def test_a_benchmark_that_fails_to_load_is_named_and_the_others_still_work(capsys, monkeypatch):
    from pacore_benchmarks import cli as bench_cli

    monkeypatch.setitem(bench_cli.BENCHMARKS, "nosuch", "pacore_benchmarks.nosuch_cli")
    code, _, err = _run(capsys, "bench", "coordination", "--methods", "nope")
    assert code == 2 and len(err) == 2
    assert err[0].startswith("pacore: warning: benchmark 'nosuch' (pacore_benchmarks.nosuch_cli) failed to load")
    assert "unknown methods ['nope']" in err[1]
