"""A run folder continued at a larger schedule: its rows become what the new runs reuse.

A folder made at ``rounds [4]`` and run again at ``[16]`` (with every other field of its fingerprint the same) is
an escalation, not a mistake: its ``results.jsonl`` is kept aside as ``results.4.jsonl`` (``results.32-4.jsonl``
for ``[32, 4]``), the fingerprint becomes the new one, and each problem runs again at the new schedule with its
earlier row as the pool its trajectories are taken from where they are draws of the new requests
(:mod:`pacore_graph.graph.reuse`). A smaller schedule, or a change of anything else (model, template, sampling,
problem), is refused as before. After a kill the same command continues: the rows already written at the new
schedule are skipped, the others still find their earlier rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pacore_graph.batch.results_file import RESULTS_FILE, ResultsFile
from pacore_graph.coordination.escalation import escalates
from pacore_graph.errors import UsageError

SCHEDULE_FIELD = "rounds"  # the fingerprint field an escalation may change
_EARLIER = re.compile(r"^results\.(\d+(?:-\d+)*)\.jsonl$")


def escalated_from(stored: Mapping[str, Any], wanted: Mapping[str, Any], differing: list[str]) -> list[int] | None:
    """The folder's earlier rounds when the two fingerprints differ in ``rounds`` alone and the new rounds continue
    them; None when they differ otherwise. A smaller schedule is refused here, saying so."""
    if [line.split(":", 1)[0] for line in differing] != [SCHEDULE_FIELD]:
        return None
    earlier, later = stored.get(SCHEDULE_FIELD), wanted.get(SCHEDULE_FIELD)
    if not (_schedule(earlier) and _schedule(later)):
        return None
    assert isinstance(earlier, list) and isinstance(later, list)
    if not escalates(earlier, later):
        raise UsageError(
            f"the folder holds results of rounds {earlier}; rounds {later} is smaller: a folder continues only at a "
            "schedule as long or longer with every round at least as wide (choose another output folder)"
        )
    return earlier


def _schedule(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(k, int) for k in value)


def earlier_results_name(rounds: list[int]) -> str:
    return f"results.{'-'.join(map(str, rounds)) or '0'}.jsonl"


def keep_earlier_results(folder: Path, rounds: list[int]) -> Path | None:
    """Move the folder's results aside under their schedule's name (nothing to move: None)."""
    current = folder / RESULTS_FILE
    if not current.exists():
        return None
    kept = folder / earlier_results_name(rounds)
    if kept.exists():  # an escalation runs each schedule once: a file of that name is someone's doing
        raise UsageError(f"{kept} exists already: move it away to continue {folder} at a larger schedule")
    current.rename(kept)
    return kept


def earlier_rows(folder: Path, key: Callable[[dict[str, Any]], str]) -> dict[str, dict[str, Any]]:
    """Each problem's row of the largest schedule kept aside in ``folder`` (the latest: every escalation grows)."""
    kept = []
    for path in folder.glob("results.*.jsonl"):
        match = _EARLIER.match(path.name)
        if match:
            schedule = [int(k) for k in match.group(1).split("-")]
            kept.append((sum(schedule), path))
    rows: dict[str, dict[str, Any]] = {}
    for _, path in sorted(kept):  # larger schedules last: their rows win
        for row in ResultsFile(path, key=key).rows:
            rows[key(row)] = row
    return rows
