"""MultiChallenge scoring and reports on hand-made result rows."""

from __future__ import annotations

import pytest
from rich.console import Console

from pacore_benchmarks.multichallenge.data import SkippedRow
from pacore_benchmarks.multichallenge.report import markdown_report, plot_scores, print_summary
from pacore_benchmarks.multichallenge.scoring import row_passed, score_rows
from pacore_benchmarks.multichallenge.settings import RunSettings


def row(qid, axis, sample=0, verdict="YES", criteria="YES", ttc=100, error=None, judge_error=None):
    return {
        "question_id": qid,
        "axis": axis,
        "sample": sample,
        "verdict": verdict,
        "pass_criteria": criteria,
        "ttc": ttc,
        "error": error,
        "judge_error": judge_error,
    }


def wanted(rows) -> dict[str, str]:
    return {r["question_id"]: r["axis"] for r in rows}


def test_pass_means_verdict_equals_criteria_and_errors_never_pass():
    assert row_passed(row("a", "SELF_COHERENCE", verdict="YES", criteria="YES"))
    assert row_passed(row("a", "SELF_COHERENCE", verdict="NO", criteria="NO"))
    assert not row_passed(row("a", "SELF_COHERENCE", verdict="NO", criteria="YES"))
    assert not row_passed(row("a", "SELF_COHERENCE", verdict=None, judge_error="unreadable"))
    assert not row_passed(row("a", "SELF_COHERENCE", verdict="YES", error="HTTP 400"))
    assert not row_passed(row("a", "SELF_COHERENCE", verdict="YES", judge_error="stale"))
    assert not row_passed(None)  # unfinished


def test_overall_is_the_mean_of_axes_not_of_conversations():
    rows = [row(f"im{i}", "INFERENCE_MEMORY", verdict="YES") for i in range(3)]  # 3/3 pass
    rows.append(row("sc0", "SELF_COHERENCE", verdict="NO"))  # 0/1 pass
    scores = score_rows(rows, wanted(rows), 1)
    by_axis = {a.axis: a for a in scores.axes}
    assert by_axis["INFERENCE_MEMORY"].pass_at_1 == 1.0
    assert by_axis["SELF_COHERENCE"].pass_at_1 == 0.0
    assert scores.overall_pass_at_1 == pytest.approx(0.5)  # a mean over rows would give 0.75
    assert scores.overall_official == scores.overall_pass_at_1  # one attempt: the same
    assert [a.axis for a in scores.axes] == ["INFERENCE_MEMORY", "SELF_COHERENCE"]  # official order


def test_samples_give_mean_pass_at_1_and_the_official_any_of_n():
    rows = [
        # conversation a: 1 of 4 samples passes; b: 4 of 4; c: 0 of 4 (one judge error, one response error)
        *[row("a", "INSTRUCTION_RETENTION", s, verdict="YES" if s == 2 else "NO") for s in range(4)],
        *[row("b", "INSTRUCTION_RETENTION", s) for s in range(4)],
        row("c", "INSTRUCTION_RETENTION", 0, verdict="NO"),
        row("c", "INSTRUCTION_RETENTION", 1, verdict=None, judge_error="unreadable"),
        row("c", "INSTRUCTION_RETENTION", 2, verdict=None, error="HTTP 400 context", ttc=None),
        row("c", "INSTRUCTION_RETENTION", 3, verdict="NO", ttc=300),
    ]
    scores = score_rows(rows, wanted(rows), 4)
    (axis,) = scores.axes
    assert axis.conversations == 3 and axis.rows == 12 and axis.unfinished == 0
    assert axis.pass_at_1 == pytest.approx((0.25 + 1.0 + 0.0) / 3)
    assert axis.official == pytest.approx(2 / 3)  # a and b passed at least once
    assert axis.response_errors == 1 and axis.judge_errors == 1
    assert axis.mean_ttc == pytest.approx((100 * 10 + 300) / 11)  # rows without TTC are left out
    assert scores.samples == 4
    assert scores.overall_pass_at_1 == pytest.approx(axis.pass_at_1)
    assert scores.overall_official == pytest.approx(axis.official)


def test_unfinished_rows_stay_in_the_denominator_as_failures():
    rows = [
        row("a", "SELF_COHERENCE", 0),  # passes; its sample 1 never finished
        row("b", "SELF_COHERENCE", 0, verdict="NO"),
        row("b", "SELF_COHERENCE", 1),
        # c: asked for, never finished at all
        row("x", "SELF_COHERENCE", 0),  # not asked for this run: ignored
        row("a", "SELF_COHERENCE", 2),  # a sample beyond --samples: ignored
    ]
    scores = score_rows(rows, {"a": "SELF_COHERENCE", "b": "SELF_COHERENCE", "c": "SELF_COHERENCE"}, 2)
    (axis,) = scores.axes
    assert axis.conversations == 3 and axis.rows == 6 and axis.unfinished == 3
    assert axis.pass_at_1 == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert axis.official == pytest.approx(2 / 3)
    assert scores.unfinished == 3 and scores.rows == 6 and scores.conversations == 3
    nothing = score_rows([], {"a": "SELF_COHERENCE"}, 1)
    assert nothing.overall_pass_at_1 == 0.0 and nothing.overall_official == 0.0 and nothing.unfinished == 1


def test_no_rows_scores_nothing():
    scores = score_rows([], {}, 1)
    assert scores.axes == [] and scores.overall_pass_at_1 is None and scores.rows == 0


def _settings(**overrides) -> RunSettings:
    return RunSettings.model_validate({"data": "d.jsonl", "output": "out", "rounds": [4], "preset": "low", **overrides})


def test_markdown_report_has_table_overall_errors_and_skips(tmp_path):
    rows = [row("a", "INFERENCE_MEMORY"), row("b", "RELIABLE_VERSION_EDITING", verdict="NO", ttc=2500)]
    scores = score_rows(rows, {**wanted(rows), "c": "INFERENCE_MEMORY", "d": "SELF_COHERENCE"}, 1)
    text = markdown_report(
        scores,
        _settings(samples=1, judge_base_url="http://judge/v1", judge_model="gpt-4o-2024-08-06"),
        skipped=[SkippedRow(where="q-17", reason="TARGET_QUESTION missing")],
        judge_formats={"json_schema": 2},
        plot_name="axis_scores.png",
    )
    assert "| axis | conv | pass@1 % | official % | mean TTC | unfinished | resp err | judge err |" in text
    assert "| INFERENCE_MEMORY | 2 | 50.0 | 50.0 | 100 | 1 | 0 | 0 |" in text
    assert "| SELF_COHERENCE | 1 | 0.0 | 0.0 | - | 1 | 0 | 0 |" in text
    assert "| RELIABLE_VERSION_EDITING | 1 | 0.0 | 0.0 | 2,500 | 0 | 0 | 0 |" in text
    assert "| OVERALL | 4 | 16.7 | 16.7 | 1,300 | 2 | 0 | 0 |" in text
    assert "official = MultiChallenge's official aggregation" in text
    assert "Judge: `gpt-4o-2024-08-06` at http://judge/v1, the official MultiChallenge judge prompt" in text
    assert "structured output json_schema (2 rows)" in text and "Warning" not in text
    assert "`q-17`: TARGET_QUESTION missing" in text
    assert "2 (conversation, sample) rows are not finished and count as failures" in text
    assert "PaCoRe [4] + final 1 (preset low)" in text
    assert "![pass@1 per axis](axis_scores.png)" in text
    eight = markdown_report(score_rows(rows, wanted(rows), 8), _settings(samples=8))
    assert "| official (any of 8) % |" in eight
    assert "**Warning:** the judge is the responder itself" in eight  # both on the embedded model


def test_terminal_table_and_plot(tmp_path):
    rows = [row("a", "SELF_COHERENCE"), row("b", "SELF_COHERENCE", verdict="NO")]
    scores = score_rows(rows, wanted(rows), 1)
    console = Console(record=True, width=100)
    print_summary(scores, _settings(rounds=[], preset=None), console)
    text = console.export_text()
    assert "SELF_COHERENCE" in text and "50.0" in text and "plain single call" in text and "official" in text
    path = tmp_path / "plot.png"
    assert plot_scores(scores, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
