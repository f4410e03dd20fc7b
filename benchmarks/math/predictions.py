"""Predictions files for ``pacore bench math grade``: JSON lines (or one JSON list) of ``{"id", "response"}``,
read with the first bad row named, and graded one verdict per row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pacore_benchmarks.math.data import DataError, Problem, read_json_rows
from pacore_benchmarks.math.grading import MathGrader


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """Rows of {id, response} from JSONL or a JSON list; the first bad row is named."""
    where, rows = read_json_rows(path, "predictions")
    predictions = []
    for number, row in rows:
        if not isinstance(row, dict) or "id" not in row or "response" not in row:
            raise DataError(f"{path} {where} {number}: expected an object with fields 'id' and 'response'")
        if row["response"] is not None and not isinstance(row["response"], str):
            raise DataError(f"{path} {where} {number}: 'response' must be a string (or null: no answer)")
        predictions.append({"id": str(row["id"]), "response": row["response"]})
    if not predictions:
        raise DataError(f"{path}: no predictions in it")
    return predictions


def grade_predictions(
    problems: list[Problem], predictions: list[dict[str, Any]], grader: MathGrader | None = None
) -> list[dict[str, Any]]:
    """One verdict row per prediction ({id, response}); unknown ids are refused by the caller."""
    grader = grader or MathGrader()
    gold = {p.id: p for p in problems}
    verdicts = []
    for prediction in predictions:
        problem = gold[prediction["id"]]
        verdict = grader.grade(prediction["response"], problem.answer)
        verdicts.append(
            {
                "id": problem.id,
                "correct": verdict.correct,
                "extracted": verdict.extracted,
                "gold": problem.answer,
                "flag": verdict.flag,
            }
        )
    return verdicts
