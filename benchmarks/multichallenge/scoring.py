"""MultiChallenge scores from result rows.

Official protocol: a conversation passes when the judge's verdict equals PASS_CRITERIA; an axis scores
the mean over its conversations; overall is the mean of the axis scores (not of all conversations, so
the 113 INFERENCE_MEMORY rows do not dominate). With several samples per conversation, pass@1 is the
per-conversation mean over samples and any-pass@N asks whether at least one sample passed.
Rows whose response or judgement failed count as not passed: an error must never look like a pass.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from statistics import fmean
from typing import Any

from pydantic import BaseModel

from pacore_benchmarks.multichallenge.data import AXES


class AxisScore(BaseModel):
    axis: str
    conversations: int
    rows: int  # (conversation, sample) pairs scored
    pass_at_1: float
    any_pass: float
    mean_ttc: float | None
    response_errors: int
    judge_errors: int


class Scores(BaseModel):
    axes: list[AxisScore]
    overall_pass_at_1: float | None
    overall_any_pass: float | None
    mean_ttc: float | None  # over all rows that have a response
    max_samples: int  # N in any-pass@N: the most samples any conversation has
    conversations: int
    rows: int
    response_errors: int
    judge_errors: int


def row_passed(row: Mapping[str, Any]) -> bool:
    """A row passes only with a response, a verdict, no error, and verdict == PASS_CRITERIA."""
    if row.get("error") or row.get("judge_error") or row.get("verdict") is None:
        return False
    return row["verdict"] == row["pass_criteria"]


def score_rows(rows: Iterable[Mapping[str, Any]]) -> Scores:
    by_conversation: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    axis_of: dict[str, str] = {}
    for row in rows:
        by_conversation[row["question_id"]].append(row)
        axis_of[row["question_id"]] = row["axis"]

    axes: list[AxisScore] = []
    for axis in [*AXES, *sorted(set(axis_of.values()) - set(AXES))]:
        ids = [qid for qid, a in axis_of.items() if a == axis]
        if not ids:
            continue
        axis_rows = [r for qid in ids for r in by_conversation[qid]]
        per_conv = [[row_passed(r) for r in by_conversation[qid]] for qid in ids]
        ttcs = [r["ttc"] for r in axis_rows if r.get("ttc") is not None]
        axes.append(
            AxisScore(
                axis=axis,
                conversations=len(ids),
                rows=len(axis_rows),
                pass_at_1=fmean(fmean(p) for p in per_conv),
                any_pass=fmean(float(any(p)) for p in per_conv),
                mean_ttc=fmean(ttcs) if ttcs else None,
                response_errors=sum(1 for r in axis_rows if r.get("error")),
                judge_errors=sum(1 for r in axis_rows if not r.get("error") and r.get("judge_error")),
            )
        )

    all_rows = [r for conv in by_conversation.values() for r in conv]
    all_ttcs = [r["ttc"] for r in all_rows if r.get("ttc") is not None]
    return Scores(
        mean_ttc=fmean(all_ttcs) if all_ttcs else None,
        axes=axes,
        overall_pass_at_1=fmean(a.pass_at_1 for a in axes) if axes else None,
        overall_any_pass=fmean(a.any_pass for a in axes) if axes else None,
        max_samples=max((len(c) for c in by_conversation.values()), default=0),
        conversations=len(by_conversation),
        rows=len(all_rows),
        response_errors=sum(a.response_errors for a in axes),
        judge_errors=sum(a.judge_errors for a in axes),
    )
