"""What every kind of folder the viewer reads answers: an index of its problems (small,
what the page loads first) and one problem's data at a time (loaded as the problem is opened).

Kinds, told apart by their files and their rows (the viewer imports neither the agents nor the benchmarks: it
reads their files by format):

    run              pacore solve --output, RunFolder: results.jsonl rows with "id" and "rounds"
    math             pacore bench math: rows with "label", "problem_id", "sample"; pool.jsonl; summary.json
    multichallenge   pacore bench multichallenge: rows with "question_id", "axis"; scores.json
    swe-run          pacore swe run: rows with "instance_id"; trajectories/ID.json; predictions.jsonl
    swe-eval         pacore swe eval: RUN_ID/summary.json and RUN_ID/MODEL/INSTANCE/report.json (no run.json)
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from pacore_graph.viewer.paths import OutsideFolder, inside
from pacore_graph.viewer.rows import Json, RowIndex

HIDDEN_SETTINGS = ("messages", "template", "verifier_template")  # long texts the settings line leaves out


class FolderView(ABC):
    """One folder, read only. ``index()`` is the page's first load; ``problem(key)`` one problem's data."""

    kind = ""
    title = ""

    def __init__(self, root: Path, run_json: Json | None = None):
        self.root = root
        self.run_json = run_json or {}

    @classmethod
    def owns_row(cls, row: Json) -> bool:
        """Whether a row of a results file is one this kind writes."""
        return False

    @classmethod
    def claims(cls, root: Path, run_json: Json) -> bool:
        """Whether a folder with no row yet is of this kind (its files, its fingerprint)."""
        return False

    @property
    def fingerprint(self) -> Json:
        found = self.run_json.get("fingerprint")
        return found if isinstance(found, dict) else {}

    @property
    def settings(self) -> Json:
        found = self.run_json.get("settings")
        return found if isinstance(found, dict) else {}

    def path(self, relative: str) -> Path:
        """A file of the folder (OutsideFolder for one that would lead out of it)."""
        return inside(self.root, relative)

    def read_json(self, relative: str) -> Any:
        """A JSON file of the folder, or None when it is missing, unreadable or leads out of the folder."""
        try:
            return json.loads(self.path(relative).read_text(encoding="utf-8"))
        except (OSError, ValueError, OutsideFolder):
            return None

    def header(self) -> Json:
        """What every index starts with: the kind, the folder's name, its settings as short texts."""
        settings = [
            [name, _short_value(value)] for name, value in self.fingerprint.items() if name not in HIDDEN_SETTINGS
        ]
        name = self.root.name or str(self.root)
        return {"kind": self.kind, "title": self.title, "folder": name, "settings": settings}

    @abstractmethod
    def index(self) -> Json:
        """The index: ``header()`` plus ``columns``, ``problems`` (each with its ``key``), ``summary`` and
        ``notes``. Cheap to call again: it reads only what was appended since."""

    @abstractmethod
    def problem(self, key: str) -> Json | None:
        """One problem's data, or None for a key the index does not have."""

    def part(self, key: str, name: str) -> str | None:
        """A long text of a problem left out of its data and loaded when asked for (a pool trajectory's
        reasoning); None when the kind has no such part."""
        return None

    def keys(self) -> list[str]:
        """Every problem's key, in index order (the self-contained report embeds each one)."""
        return [str(entry["key"]) for entry in self.index()["problems"]]


def _short_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 160 else text[:159] + "…"


def percent(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f} %"


def row_notes(rows: RowIndex) -> list[str]:
    """What the index says of its results file: a row being written that it skipped."""
    return ["a row being written was skipped (reload to see it once it is whole)"] if rows.being_written else []


def column(key: str, title: str, kind: str = "text") -> Json:
    """A column of the problems table: ``kind`` text, number, score (a share 0..1, coloured) or flag (1 or 0)."""
    return {"key": key, "title": title, "type": kind}
