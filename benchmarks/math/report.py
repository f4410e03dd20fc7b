"""The math benchmark's outputs in its folder: ``curve.png``, ``table.md`` and ``summary.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pacore_benchmarks.math.plot import markdown_table, per_problem_table, plot_curve
from pacore_benchmarks.math.summary import Point, per_problem, summarize


def write_outputs(
    output: Path,
    rows: list[dict[str, Any]],
    problem_ids: list[str],
    complete: list[str],
    failures: list[dict[str, Any]],
    title: str,
) -> tuple[list[Point], Path | None, Path | None]:
    """Points over the ``complete`` problems (those with no failed unit), their plot and tables."""
    points = summarize(rows, complete) if complete else []
    png = table = None
    if points:
        png = plot_curve(points, output / "curve.png", title=title)
        table = output / "table.md"
        labels = [p.label for p in points]
        table.write_text(
            "## Accuracy against effective test-time compute\n\n"
            + markdown_table(points)
            + "\n## Per problem (pass@1 / mean effective tokens)\n\n"
            + per_problem_table(per_problem(rows), labels, problem_ids)
        )
    summary = {
        "points": [p.model_dump() for p in points],
        "failures": failures,
        "problems": len(problem_ids),
        "complete_problems": len(complete),
    }
    (output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return points, png, table
