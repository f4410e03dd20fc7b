"""End to end on the real embedded model (SmolLM2 through llama-cpp-python's server): the command a user
runs on a fresh clone produces the results, the table and the PNG, and a second run resumes instead of
redoing anything. Short generations keep it to a minute or two on two cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AIME = ROOT / "tests" / "fixtures" / "math" / "aime_2025.jsonl"
COMMAND = [sys.executable, "-m", "pacore_graph.cli", "bench", "math", "--data", str(AIME), "--limit", "2"]
COMMAND += ["--rounds", "2", "--max-tokens", "48", "--no-progress"]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}  # the embedded model, for sure
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.embedded
def test_math_benchmark_on_the_embedded_model(tmp_path: Path) -> None:
    output = tmp_path / "math"
    done = _run([*COMMAND, "--output", str(output)])
    assert done.returncode == 0, done.stderr[-4000:]
    assert "using the embedded SmolLM2" in done.stderr

    pool = _jsonl(output / "pool.jsonl")
    assert len(pool) == 4 and {row["problem_id"] for row in pool} == {"aime_2025_I_1", "aime_2025_I_2"}
    assert all(row["model"] == "smollm2-135m-instruct" for row in pool)
    assert all(1 <= row["completion_tokens"] <= 48 for row in pool)

    rows = _jsonl(output / "results.jsonl")
    assert sorted(row["label"] for row in rows) == ["pacore[2]"] * 2 + ["single"] * 4 + ["vote@2"] * 2
    for row in rows:
        assert isinstance(row["correct"], bool) and row["ttc"] > 0
        if row["correct"] is False and row["answer"] is None:
            assert row["flag"] in {"no_boxed", "no_conclusion"}  # ungradable is flagged
    for row in (r for r in rows if r["method"] == "pacore"):
        first, synthesis = row["round_tokens"]
        assert 1 <= synthesis <= 48  # the second round really called the model
        assert first == sum(p["completion_tokens"] for p in pool if p["problem_id"] == row["problem_id"])
        assert row["ttc"] == first + synthesis and row["model_calls"] == 1

    png = output / "curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    table = (output / "table.md").read_text()
    for label in ("| single |", "| vote@2 |", "| [2] |", "| aime_2025_I_2 |"):
        assert label in table
    assert "accuracy (pass@1)" in done.stdout and str(png) in done.stdout

    again = _run([*COMMAND, "--output", str(output)])  # resume: everything is done already
    assert again.returncode == 0, again.stderr[-4000:]
    assert _jsonl(output / "results.jsonl") == rows and _jsonl(output / "pool.jsonl") == pool

    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        "".join(
            json.dumps({"id": r["problem_id"], "response": r["conclusion"]}) + "\n" for r in rows if "conclusion" in r
        )
    )
    graded = _run(
        [sys.executable, "-m", "pacore_graph.cli", "bench", "math", "grade", "--data", str(AIME)]
        + ["--predictions", str(predictions)]
    )
    assert graded.returncode == 0, graded.stderr[-4000:]
    verdicts = _jsonl(tmp_path / "predictions.verdicts.jsonl")
    by_id = {r["problem_id"]: r for r in rows if r["method"] == "pacore"}
    assert {v["id"]: v["correct"] for v in verdicts} == {k: r["correct"] for k, r in by_id.items()}
    correct = sum(v["correct"] for v in verdicts)
    assert f"accuracy: {correct}/2 = " in graded.stdout
