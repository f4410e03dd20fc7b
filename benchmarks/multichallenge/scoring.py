"""MultiChallenge scores from result rows, over every (conversation, sample) the run was asked for.

A row passes when the judge's verdict equals PASS_CRITERIA; an axis scores the mean over its
conversations; overall is the mean of the axis scores (not of all conversations, so the 113
INFERENCE_MEMORY rows do not dominate). Two aggregations stand side by side:
- the official one (ekwinox117/multi-challenge ``ResultParser.calculate_scores``): a conversation passes
  when any of its attempts passed;
- pass@1: per conversation, the mean over its samples.
With one sample they are equal. A (conversation, sample) with no result row (unfinished), a failed
response and a failed judgement all count as not passed and stay in the denominator: an error must never
look like a pass, nor shrink the test. (The official evaluator files a failed judgement under an axis
named "NA"; here it stays in its conversation's axis.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from statistics import fmean
from typing import Any

from pydantic import BaseModel

from pacore_benchmarks.multichallenge.data import AXES


class AxisScore(BaseModel):
    axis: str
    conversations: int
    rows: int  # (conversation, sample) pairs asked for
    unfinished: int  # of them without a result row (counted as not passed)
    pass_at_1: float
    official: float  # MultiChallenge's official score: a conversation passes if any attempt passed
    mean_ttc: float | None
    response_errors: int
    judge_errors: int


class Scores(BaseModel):
    axes: list[AxisScore]
    overall_pass_at_1: float | None
    overall_official: float | None
    mean_ttc: float | None  # over all rows that have a response
    samples: int  # attempts per conversation: N in the official any-of-N
    conversations: int
    rows: int
    unfinished: int
    response_errors: int
    judge_errors: int


def row_passed(row: Mapping[str, Any] | None) -> bool:
    """A row passes only with a response, a verdict, no error, and verdict == PASS_CRITERIA."""
    if row is None or row.get("error") or row.get("judge_error") or row.get("verdict") is None:
        return False
    return bool(row["verdict"] == row["pass_criteria"])


def score_rows(rows: Iterable[Mapping[str, Any]], wanted: Mapping[str, str], samples: int) -> Scores:
    """Score the conversations ``wanted`` (question id -> axis), ``samples`` attempts each.

    Rows of other conversations or of higher samples are ignored; a missing row is unfinished.
    """
    found = {(row["question_id"], int(row["sample"])): row for row in rows}
    axes: list[AxisScore] = []
    for axis in [*AXES, *sorted(set(wanted.values()) - set(AXES))]:
        ids = [qid for qid, a in wanted.items() if a == axis]
        if not ids:
            continue
        grid = [[found.get((qid, sample)) for sample in range(samples)] for qid in ids]
        present = [row for attempts in grid for row in attempts if row is not None]
        passed = [[row_passed(row) for row in attempts] for attempts in grid]
        ttcs = [row["ttc"] for row in present if row.get("ttc") is not None]
        axes.append(
            AxisScore(
                axis=axis,
                conversations=len(ids),
                rows=len(ids) * samples,
                unfinished=len(ids) * samples - len(present),
                pass_at_1=fmean(fmean(p) for p in passed),
                official=fmean(float(any(p)) for p in passed),
                mean_ttc=fmean(ttcs) if ttcs else None,
                response_errors=sum(1 for row in present if row.get("error")),
                judge_errors=sum(1 for row in present if not row.get("error") and row.get("judge_error")),
            )
        )
    all_ttcs = [
        row["ttc"] for key, row in found.items() if key[0] in wanted and key[1] < samples and row.get("ttc") is not None
    ]
    return Scores(
        axes=axes,
        overall_pass_at_1=fmean(a.pass_at_1 for a in axes) if axes else None,
        overall_official=fmean(a.official for a in axes) if axes else None,
        mean_ttc=fmean(all_ttcs) if all_ttcs else None,
        samples=samples,
        conversations=len(wanted),
        rows=len(wanted) * samples,
        unfinished=sum(a.unfinished for a in axes),
        response_errors=sum(a.response_errors for a in axes),
        judge_errors=sum(a.judge_errors for a in axes),
    )
