"""From result rows to the curve: pass@1 averaged per problem then over problems, like-for-like problem sets,
a markdown table and a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from pacore_benchmarks.math.plot import markdown_table, per_problem_table, plot_curve
from pacore_benchmarks.math.summary import per_problem, setting_title, summarize


def _row(label: str, method: str, problem: str, sample: int, correct: bool, ttc: int, flag=None) -> dict:
    return {
        "label": label,
        "method": method,
        "problem_id": problem,
        "sample": sample,
        "correct": correct,
        "ttc": ttc,
        "flag": flag,
    }


ROWS = [
    # single: p1 has 4 samples (3 right), p2 has 2 (0 right) -> per problem 0.75 and 0 -> 0.375
    *[_row("single", "single", "p1", i, i < 3, 100) for i in range(4)],
    *[_row("single", "single", "p2", i, False, 300, "no_boxed") for i in range(2)],
    _row("vote@4", "vote", "p1", 0, True, 400),
    _row("vote@4", "vote", "p2", 0, False, 1200),
    _row("pacore[4]", "pacore", "p1", 0, True, 450),
    _row("pacore[4]", "pacore", "p1", 1, True, 550),
    _row("pacore[4]", "pacore", "p2", 0, True, 1250),
    _row("pacore[4]", "pacore", "p3", 0, True, 999),  # only PaCoRe finished p3: left out of every point
]


def test_points_average_per_problem_then_over_common_problems() -> None:
    points = {p.label: p for p in summarize(ROWS)}
    assert points["single"].accuracy == pytest.approx(0.375)
    assert points["single"].ttc == pytest.approx(200)
    assert points["single"].ungradable == 2
    assert points["vote@4"].accuracy == 0.5 and points["vote@4"].ttc == 800
    assert points["pacore[4]"].accuracy == 1.0 and points["pacore[4]"].ttc == pytest.approx((500 + 1250) / 2)
    assert all(p.problems == 2 for p in points.values())
    assert [p.method for p in summarize(ROWS)] == ["single", "vote", "pacore"]


def test_titles_table_and_png(tmp_path: Path) -> None:
    assert setting_title("pacore[32,4]") == "high [32, 4]" and setting_title("pacore[8,2]") == "[8, 2]"
    assert setting_title("vote@4") == "vote@4"
    points = summarize(ROWS)
    table = markdown_table(points)
    assert "| PaCoRe | low [4] | 100.0% | 875 | 2 | 2 | 0 |" in table
    assert "| single trajectory | single | 37.5% | 200 | 2 | 3 | 2 |" in table
    cells = per_problem(ROWS)
    detail = per_problem_table(cells, [p.label for p in points], ["p2", "p1"])
    assert detail.splitlines()[2].startswith("| p2 | 0% / 300 | 0% / 1.2k | 100% / 1.25k |")
    png = plot_curve(points, tmp_path / "sub" / "curve.png", title="t")
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
