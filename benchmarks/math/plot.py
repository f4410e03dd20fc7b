"""The test-time scaling curve (accuracy against effective TTC, log x) as a PNG, and the same as markdown."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TypedDict

from pacore_benchmarks.math.summary import Point, ProblemCell, setting_title


class Style(TypedDict):
    """How one method's curve is drawn: colour (None: matplotlib's next), marker, legend name, label offset."""

    color: str | None
    marker: str
    name: str
    offset: tuple[int, int]


STYLE: dict[str, Style] = {
    "single": {"color": "#7f7f7f", "marker": "s", "name": "single trajectory", "offset": (6, 6)},
    "vote": {"color": "#1f77b4", "marker": "o", "name": "majority vote (first round)", "offset": (6, -14)},
    "pacore": {"color": "#d62728", "marker": "D", "name": "PaCoRe", "offset": (-6, 8)},
}


def plot_curve(points: list[Point], path: str | Path, title: str = "Test-time scaling") -> Path:
    """One line per method, each point labelled with its setting; x is log-scaled effective TTC."""
    import matplotlib  # noqa: PLC0415 - heavy, and the backend must be chosen before pyplot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415

    path = Path(path)
    by_method: dict[str, list[Point]] = defaultdict(list)
    for point in points:
        by_method[point.method].append(point)
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=120)
    for method, method_points in by_method.items():
        method_points = sorted(method_points, key=lambda p: p.ttc)
        style = STYLE.get(method, Style(color=None, marker="^", name=method, offset=(6, 6)))
        xs = [max(p.ttc, 1.0) for p in method_points]
        ys = [100 * p.accuracy for p in method_points]
        axes.plot(
            xs, ys, marker=style["marker"], color=style["color"], label=style["name"], linewidth=1.8, markersize=7
        )
        for point, x, y in zip(method_points, xs, ys, strict=True):
            axes.annotate(
                setting_title(point.label),
                (x, y),
                textcoords="offset points",
                xytext=style["offset"],
                ha="right" if style["offset"][0] < 0 else "left",
                fontsize=8,
                color=style["color"],
            )
    axes.set_xscale("log")
    axes.margins(x=0.12)
    # ticks at 1-2-5 steps, written as tokens people read (500, 2k, 1.5M), no clutter of minor labels
    axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _tokens(value)))
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("effective test-time compute (completion tokens per problem, log scale)")
    axes.set_ylabel("accuracy, pass@1 (%)")
    top = max([100 * p.accuracy for p in points] + [10])
    axes.set_ylim(-2, min(105, top + 10))
    problems = max((p.problems for p in points), default=0)
    axes.set_title(f"{title} ({problems} problems)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="best")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def _tokens(value: float) -> str:
    """1234567 -> 1.23M, 25000 -> 25k, 2000 -> 2k, 980 -> 980."""
    if value >= 1e6:
        return f"{value / 1e6:.3g}M"
    if value >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.0f}"


def markdown_table(points: list[Point]) -> str:
    lines = [
        "| method | setting | accuracy (pass@1) | effective TTC per problem | problems | samples | ungradable |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        name = STYLE[p.method]["name"] if p.method in STYLE else p.method
        lines.append(
            f"| {name} | {setting_title(p.label)} | {100 * p.accuracy:.1f}% | "
            f"{_tokens(p.ttc)} | {p.problems} | {p.samples} | {p.ungradable} |"
        )
    return "\n".join(lines) + "\n"


def per_problem_table(
    cells: dict[str, dict[str, ProblemCell]], labels: list[str], problem_ids: list[str] | None = None
) -> str:
    """Problem x setting: pass@1 and mean TTC, so a surprising average can be traced to its problems."""
    if problem_ids is None:
        problem_ids = sorted({p for by_problem in cells.values() for p in by_problem})
    header = "| problem | " + " | ".join(setting_title(label) for label in labels) + " |"
    lines = [header, "|---|" + "---:|" * len(labels)]
    for problem_id in problem_ids:
        row = []
        for label in labels:
            cell = cells.get(label, {}).get(problem_id)
            row.append("-" if cell is None else f"{100 * cell.accuracy:.0f}% / {_tokens(cell.ttc)}")
        lines.append(f"| {problem_id} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
