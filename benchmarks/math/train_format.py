"""PaCoRe-Train rows, both ways: read as problems (``--data``), written by ``export-train``.

The released PaCoRe-Train-8k (stepfun-ai/PaCoRe's README) is a ``list[dict]``, one training instance each:
``conversation`` (the problem's messages), ``responses`` (cached trajectories of the model: the message
set M a PaCoRe round is trained on) and ``ground_truth`` (the verifiable answer). Its code rows carry
tests rather than an answer: the math benchmark cannot grade those and refuses them by name.
"""

from __future__ import annotations

import json
from typing import Any

from pacore_benchmarks.math.data import DataError, Problem

ROLES = ("system", "user", "assistant")
GROUND_TRUTH_FORMS = 'a string or number, or {"answer": ...}'


def gold_answer(value: Any, where: str) -> str:
    """The gold answer a ``ground_truth`` holds; a DataError naming the row when it has none to grade."""
    if isinstance(value, dict) and "answer" in value:
        value = value["answer"]  # the reference pipeline's own input rows write {"answer": ...}
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        shown = json.dumps(value, ensure_ascii=False)[:60]
        raise DataError(f"{where}: ground_truth {shown} is not a gradable math answer ({GROUND_TRUTH_FORMS})")
    text = str(value).strip()
    if not text:
        raise DataError(f"{where}: ground_truth is empty: nothing to grade against")
    if text[0] in "[{":
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list | dict):  # a code row's test cases, JSON in a string
            raise DataError(
                f"{where}: ground_truth {text[:60]!r} is JSON data (test cases?), not a gradable math answer"
            )
    return text


def _conversation(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: conversation must be a non-empty list of {{role, content}} messages")
    messages = []
    for number, message in enumerate(value, start=1):
        well_formed = isinstance(message, dict) and message.get("role") in ROLES
        if not well_formed or not isinstance(message.get("content"), str):
            raise DataError(
                f'{where}: conversation message {number} must be {{"role": {" | ".join(ROLES)}, "content": text}}'
            )
        messages.append({"role": message["role"], "content": message["content"]})
    if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise DataError(f"{where}: conversation must end with the user's problem (a non-empty user message)")
    return messages


def problem_from_train_row(row: dict[str, Any], where: str, default_id: str) -> Problem:
    """A PaCoRe-Train row as a problem: its conversation asked as it is, its ground truth the gold."""
    if "ground_truth" not in row:
        raise DataError(f"{where}: PaCoRe-Train row has no ground_truth: nothing to grade against")
    conversation = _conversation(row["conversation"], where)
    known = {"id", "conversation", "ground_truth", "responses", "message_accuracy", "synthesis_accuracy", "synthesis"}
    return Problem(
        id=str(row["id"]) if row.get("id") is not None else default_id,
        problem=conversation[-1]["content"],
        answer=gold_answer(row["ground_truth"], where),
        conversation=conversation,
        extra={k: v for k, v in row.items() if k not in known},
    )


def train_row(
    problem: Problem, responses: list[str], message_accuracy: float, synthesis: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One exported row in PaCoRe-Train's shape, plus the id and the accuracies the filters read."""
    row: dict[str, Any] = {
        "id": problem.id,
        "conversation": problem.asked(),
        "responses": responses,
        "ground_truth": problem.answer,
        "message_accuracy": message_accuracy,
    }
    if synthesis is not None:
        row["synthesis_accuracy"] = synthesis["accuracy"]
        row["synthesis"] = synthesis
    return row
