"""``pacore bench math grade``: gold answers written as responses grade all correct, altered ones all wrong;
one verdict per row; bad input gets one clear message."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from waits import still_running, wait_until

from pacore_graph.cli import main

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "math"


def _rows(competition: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{competition}.jsonl").read_text().splitlines()]


def _alter(answer: str) -> str:
    return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), answer, count=1)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("competition", ["hmmt_feb_2024", "aime_2024"])
def test_grade_gold_all_correct_and_altered_all_wrong(tmp_path: Path, capsys, competition: str) -> None:
    rows = _rows(competition)
    data = str(DATA / f"{competition}.jsonl")
    gold = _write(tmp_path / "gold.jsonl", [{"id": r["id"], "response": f"\\boxed{{{r['answer']}}}"} for r in rows])
    assert main(["bench", "math", "grade", "--data", data, "--predictions", str(gold)]) == 0
    out = capsys.readouterr().out
    assert f"accuracy: {len(rows)}/{len(rows)} = 100.00%" in out
    verdicts = [json.loads(line) for line in (tmp_path / "gold.verdicts.jsonl").read_text().splitlines()]
    assert [v["id"] for v in verdicts] == [r["id"] for r in rows]
    assert all(v["correct"] and v["flag"] is None for v in verdicts)

    altered = _write(
        tmp_path / "altered.jsonl",
        [{"id": r["id"], "response": f"The answer is $\\boxed{{{_alter(r['answer'])}}}$."} for r in rows],
    )
    verdict_path = tmp_path / "out" / "v.jsonl"
    args = ["bench", "math", "grade", "--data", data, "--predictions", str(altered), "--verdicts", str(verdict_path)]
    assert main(args) == 0
    assert f"accuracy: 0/{len(rows)} = 0.00%" in capsys.readouterr().out
    assert not any(json.loads(line)["correct"] for line in verdict_path.read_text().splitlines())


def test_grade_counts_partial_predictions_and_flags(tmp_path: Path, capsys) -> None:
    rows = _rows("aime_2025")[:3]
    predictions = _write(
        tmp_path / "p.jsonl",
        [
            {"id": rows[0]["id"], "response": f"<think>...</think>\\boxed{{{rows[0]['answer']}}}"},
            {"id": rows[1]["id"], "response": "I could not finish."},
            {"id": rows[1]["id"], "response": rows[1]["answer"]},  # a second sample, written bare
            {"id": rows[0]["id"], "response": None},  # a failed generation: no answer
        ],
    )
    assert (
        main(["bench", "math", "grade", "--data", str(DATA / "aime_2025.jsonl"), "--predictions", str(predictions)])
        == 0
    )
    out = capsys.readouterr().out
    assert "graded 4 prediction(s) for 2 of 3 problems; flags: 1 no_boxed, 1 no_conclusion, 1 unboxed" in out
    assert "accuracy: 2/4 = 50.00%" in out
    # per problem: 1/2 and 1/2 right, the third has no prediction
    assert "1 problem(s) have no prediction; counting them as wrong: 33.33%" in out


def test_grade_held_out_style_responses(tmp_path: Path, capsys) -> None:
    """Unboxed finals, a list boxed in pieces, a rounded decimal, a cut-off box: each graded as a reader would."""
    cases = [
        ("aime_2025", "aime_2025_I_1", "Adding the bases 21 and 49:\n\nFinal answer: 70", True),
        ("aime_2025", "aime_2025_I_2", "<think>maybe 589</think>**Final Answer:** 588", True),
        ("aime_2025", "aime_2025_I_3", "The answer is 16.", True),
        ("aime_2024", "aime_2024_I_2", "so the answer is \\boxed{25", True),
        ("aime_2024", "aime_2024_II_1", "$\\boxed{\\textbf{73}}$", True),
        ("hmmt_feb_2024", "hmmt_feb_2024_4", "\\boxed{1.411765}", False),
        ("hmmt_feb_2024", "hmmt_feb_2024_4", "The ratio is $\\frac{24}{17}$.", True),
        ("hmmt_feb_2024", "hmmt_feb_2024_9", "The roots: $\\boxed{0}$, $\\boxed{\\pm i \\sqrt 6}$", True),
        ("hmmt_feb_2024", "hmmt_feb_2024_9", "The roots: $\\boxed{0}$ and $\\boxed{i\\sqrt6}$", False),
        ("hmmt_feb_2024", "hmmt_feb_2024_28", "\\boxed{128 - 64\\sqrt{3}\\text{ cm}^2}", True),
    ]
    for competition in ("aime_2025", "aime_2024", "hmmt_feb_2024"):
        chosen = [(pid, response, correct) for comp, pid, response, correct in cases if comp == competition]
        path = _write(tmp_path / f"{competition}.jsonl", [{"id": pid, "response": r} for pid, r, _ in chosen])
        data = str(DATA / f"{competition}.jsonl")
        assert main(["bench", "math", "grade", "--data", data, "--predictions", str(path)]) == 0
        verdicts = [json.loads(line) for line in path.with_suffix(".verdicts.jsonl").read_text().splitlines()]
        assert [(v["id"], v["correct"]) for v in verdicts] == [(pid, correct) for pid, _, correct in chosen]
    capsys.readouterr()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "aime_2025_I_1"}\n', "line 1: expected an object with fields 'id' and 'response'"),
        ('{"id": "nope", "response": "1"}\n', "1 prediction id(s) are not in"),
        ('{"id": 1, "response": "1"}\n', "ids look like 'aime_2025_I_1'"),
        ('{"id": "aime_2025_I_1", "response": 5}\n', "'response' must be a string (or null: no answer)"),
        ("not json\n", ":1: not valid JSON"),
        ("", "no predictions"),
    ],
)
def test_grade_bad_predictions(tmp_path: Path, capsys, content: str, message: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    assert main(["bench", "math", "grade", "--data", str(DATA / "aime_2025.jsonl"), "--predictions", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1  # one clear message, no traceback


def test_grade_without_data_or_predictions_says_what_to_pass(tmp_path: Path, capsys, monkeypatch) -> None:
    assert main(["bench", "math", "grade", "--data", str(DATA / "aime_2025.jsonl")]) == 2
    assert "grade needs --predictions FILE" in capsys.readouterr().err
    predictions = _write(tmp_path / "p.jsonl", [{"id": "aime_2025_I_1", "response": "70"}])
    monkeypatch.chdir(tmp_path)  # no ../shared here, and the hub is out of reach (or `datasets` is missing)
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert main(["bench", "math", "grade", "--predictions", str(predictions)]) == 2
    note, error = capsys.readouterr().err.splitlines()  # what it tries, then one line saying what to pass
    assert note.endswith("is not here: reading MathArena/aime_2025 from the hub")
    assert "no --data given and ../shared/data/math/aime_2025.jsonl is not here, so" in error
    assert "pass --data PATH" in error


def test_run_rejects_bad_input_before_starting_a_model(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "problem": "", "answer": "1"}\n')
    assert main(["bench", "math", "--data", str(bad), "--output", str(tmp_path / "o")]) == 2
    assert "field 'problem' is empty" in capsys.readouterr().err
    args = ["bench", "math", "--data", str(DATA / "aime_2025.jsonl"), "--output", str(tmp_path / "o")]
    assert main([*args, "--rounds", "4,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert main([*args, "--methods", "single,best"]) == 2
    assert "unknown method 'best'" in capsys.readouterr().err
    assert main([*args, "--rounds", "8", "--pool", "4"]) == 2
    assert "--pool 4 is too small" in capsys.readouterr().err
    assert main([*args, "--preset", "huge"]) == 2
    assert "unknown preset 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_two_identical_runs_into_one_folder_one_runs_the_other_refuses_with_one_line(tmp_path: Path) -> None:
    """The second run is refused at once (before a server or a call), naming the first run's pid; the first
    writes every row once."""
    import subprocess

    from pacore_emulator import Emulator, EmulatorConfig

    out = tmp_path / "out"
    with Emulator(EmulatorConfig(ttft=3.0, output_tokens=8)) as emulator:
        command = [
            sys.executable,
            "-m",
            "pacore_graph.cli",
            "bench",
            "math",
            "--data",
            str(DATA / "aime_2025.jsonl"),
            "--limit",
            "2",
            "--rounds",
            "2",
            "--base-url",
            emulator.base_url,
            "--no-progress",
            "--output",
            str(out),
        ]
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lock = out / ".lock"
        wait_until(
            lambda: still_running(first) and lock.exists() and lock.read_text().strip() == str(first.pid),
            60,
            what="the first run holds the folder's lock",
        )
        second = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert first.poll() is None, "the first run must still be running"
        stdout, stderr = first.communicate(timeout=120)
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert second.returncode == 1 and len(lines) == 1, second.stderr
    assert f"is in use by another run (pid {first.pid})" in lines[0]
    assert first.returncode == 0, stderr
    keys = [(r["label"], r["problem_id"], r["sample"]) for r in map(json.loads, (out / "results.jsonl").open())]
    assert len(keys) == len(set(keys)) == 2 * (2 + 1 + 1)  # single x2, vote@2, pacore[2] per problem
