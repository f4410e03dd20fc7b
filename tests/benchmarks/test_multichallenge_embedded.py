"""End to end on the real embedded SmolLM2 server: a few MultiChallenge conversations, then a rerun.

Kept short (2 conversations, schedule [2], 48-token responses) so it runs in CI on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pacore_graph.models
from pacore_benchmarks.multichallenge.cli import cli
from pacore_graph.models import EmbeddedServer

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "multichallenge" / "benchmark_questions.jsonl"
pytestmark = [pytest.mark.embedded, pytest.mark.timeout(600)]


def test_embedded_run_writes_rows_table_report_then_resumes_without_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    args = [
        "--data",
        str(DATA),
        "--limit",
        "2",
        "--rounds",
        "2",
        "--max-tokens",
        "48",
        "--judge-max-tokens",
        "128",
        "--output",
        str(tmp_path),
    ]
    assert cli(args) == 0
    printed = capsys.readouterr()
    first = printed.out
    assert "INFERENCE_MEMORY" in first and "OVERALL" in first  # the terminal table
    assert "warning: the judge is the responder itself" in " ".join(printed.err.split())  # one model both sides

    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["question_id"] for r in rows] == ["674552683acc22154b07a598", "674552684d7f0f0dad442da6"]
    for row in rows:
        assert row["error"] is None, row["error"]  # these two fit the 8192-token context
        assert row["response"].strip()
        assert [r["k"] for r in row["rounds"]] == [2, 1]
        assert row["ttc"] > 0 and not row["ttc_approximate"]  # the server reports usage
        assert (row["verdict"] in ("YES", "NO")) != bool(row["judge_error"])
        assert row["passed"] == (row["verdict"] == row["pass_criteria"])
        assert row["judge_format"] == "json_object"  # llama.cpp refuses the official json_schema
    report = (tmp_path / "report.md").read_text()
    assert "| INFERENCE_MEMORY | 1 |" in report and "| OVERALL | 2 |" in report
    assert "**Warning:** the judge is the responder itself" in report
    assert json.loads((tmp_path / "scores.json").read_text())["rows"] == 2
    assert (tmp_path / "axis_scores.png").exists()

    # Rerun into the same folder: everything is done, so no model may even be started.
    def no_model(*args, **kwargs):
        raise AssertionError("a finished run must not start or call a model")

    # What the command starts its clients with (it imports them from pacore_graph.models when it runs), and
    # the embedded server itself, however it would be reached.
    monkeypatch.setattr(pacore_graph.models, "serving", no_model)
    monkeypatch.setattr(pacore_graph.models, "check_server", no_model)
    monkeypatch.setattr(EmbeddedServer, "start", no_model)
    before = (tmp_path / "results.jsonl").read_bytes()
    assert cli(args) == 0
    assert "2 done, 0 to run" in capsys.readouterr().out
    assert (tmp_path / "results.jsonl").read_bytes() == before
