"""A panel run's account per model: what each model of the panel was asked for, spent, failed and agreed on.

Read off the records (each names its model) as a run's result is built (``PaCoReResult.models``), so the result,
an answer message's metadata, a results row, the endpoint's usage and ``pacore show`` all count the same way.
Agreement compares answers as ``pacore show`` does (:func:`~pacore_graph.coordination.answers.compared_answer`):
per model, how many of its usable trajectories before the last round give the answer the run ended with. A
trajectory reused from an earlier run (escalation) counts among its model's trajectories and tokens, as in the TTC,
but its requests and seconds were the earlier run's: ``reused`` counts it instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pacore_graph.coordination.answers import compared_answer
from pacore_graph.records import RoundRecord, TrajectoryRecord


def model_accounts(rounds: Iterable[RoundRecord], answer: str) -> dict[str, dict[str, Any]]:
    """Per panel model (in the order first seen): trajectories, requests, failures, tokens, seconds and agreement
    with ``answer`` (of its usable trajectories before the last round); ``{}`` when no record names a model (a
    one-model run)."""
    accounts: dict[str, dict[str, Any]] = {}
    final = compared_answer(None, answer)
    rounds = list(rounds)
    for position, round_ in enumerate(rounds):
        compared = position < len(rounds) - 1  # the last round's conclusion is the answer: it agrees by itself
        for record in round_.trajectories:
            if record.model is not None:
                _count(accounts.setdefault(record.model, _empty()), record, final if compared else None)
    return accounts


def _empty() -> dict[str, Any]:
    return {
        "trajectories": 0,
        "requests": 0,
        "reused": 0,
        "failed": 0,
        "truncated": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "seconds": 0.0,
        "usable": 0,
        "agree": 0,
    }


def _count(account: dict[str, Any], record: TrajectoryRecord, final: str | None) -> None:
    account["trajectories"] += 1
    if record.reused:
        account["reused"] += 1
    else:
        account["requests"] += record.attempts
        account["seconds"] = round(account["seconds"] + (record.seconds or 0.0), 3)
    account["failed"] += int(record.failed)
    account["truncated"] += int(record.truncated)
    account["prompt_tokens"] += record.prompt_tokens
    account["completion_tokens"] += record.completion_tokens
    if record.usable and final is not None:
        account["usable"] += 1
        account["agree"] += int(compared_answer(record.answer, record.conclusion) == final)
