"""From result rows to points of the scaling curve: accuracy and effective TTC per method setting.

Accuracy is pass@1: per problem, the mean correctness over its samples; then the mean over problems.
TTC is per problem the mean effective tokens over its samples (every trajectory of every round), then the
mean over problems. Every setting is averaged over the same problems, so the points compare like with like.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

METHOD_ORDER = {"single": 0, "vote": 1, "pacore": 2}
PRESET_SCHEDULES = {"low": [4], "medium": [16], "high": [32, 4]}  # paper presets, for display names


def schedule_label(rounds: list[int]) -> str:
    """The canonical key of a PaCoRe schedule in result rows: ``pacore[32,4]``."""
    return "pacore[" + ",".join(str(k) for k in rounds) + "]"


def setting_title(label: str) -> str:
    """How a label reads in tables and on the plot: ``pacore[4]`` -> ``low [4]``, ``pacore[8,2]`` -> ``[8, 2]``."""
    if not (label.startswith("pacore[") and label.endswith("]")):
        return label
    rounds = [int(k) for k in label[len("pacore[") : -1].split(",") if k]
    names = [name for name, preset in PRESET_SCHEDULES.items() if preset == rounds]
    return f"{names[0]} {rounds}" if names else str(rounds)


class Point(BaseModel):
    method: str  # single | vote | pacore
    label: str  # e.g. "single", "vote@4", "pacore [32, 4]"
    accuracy: float  # 0..1
    ttc: float  # mean effective tokens per problem
    problems: int
    samples: int  # rows per problem (mean, rounded)
    ungradable: int  # rows whose answer could not be graded (counted wrong)


class ProblemCell(BaseModel):
    accuracy: float
    ttc: float
    samples: int


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def per_problem(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, ProblemCell]]:
    """label -> problem id -> that problem's pass@1 and mean TTC over its samples."""
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        grouped[row["label"]][row["problem_id"]].append(row)
    return {
        label: {
            problem_id: ProblemCell(
                accuracy=_mean([float(bool(r["correct"])) for r in samples]),
                ttc=_mean([float(r["ttc"]) for r in samples]),
                samples=len(samples),
            )
            for problem_id, samples in problems.items()
        }
        for label, problems in grouped.items()
    }


def summarize(rows: Iterable[dict[str, Any]], problem_ids: Iterable[str] | None = None) -> list[Point]:
    """One point per label, over ``problem_ids`` (default: problems that every label has finished)."""
    rows = list(rows)
    cells = per_problem(rows)
    if not cells:
        return []
    if problem_ids is None:
        common = set.intersection(*(set(by_problem) for by_problem in cells.values()))
    else:
        common = set(problem_ids)
    methods = {row["label"]: row["method"] for row in rows}
    flagged: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["problem_id"] in common and row.get("flag") not in (None, "unboxed"):
            flagged[row["label"]] += 1
    points = []
    for label, by_problem in cells.items():
        chosen = [by_problem[p] for p in sorted(common) if p in by_problem]
        if not chosen:
            continue
        points.append(
            Point(
                method=methods[label],
                label=label,
                accuracy=_mean([c.accuracy for c in chosen]),
                ttc=_mean([c.ttc for c in chosen]),
                problems=len(chosen),
                samples=round(_mean([c.samples for c in chosen])),
                ungradable=flagged[label],
            )
        )
    return sorted(points, key=lambda p: (METHOD_ORDER.get(p.method, 9), p.ttc, p.label))
