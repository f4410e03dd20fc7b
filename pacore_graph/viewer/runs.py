"""A folder of PaCoRe answers (``pacore solve --output``, ``RunFolder``): one row per problem with its answer,
rounds, TTC and failures, and (from this version on) the conversation it answered."""

from __future__ import annotations

from pathlib import Path

from pacore_graph.batch.results_file import RESULTS_FILE
from pacore_graph.viewer.folder import FolderView, column, row_notes
from pacore_graph.viewer.rounds import agreement_line, math_answer, plain_messages, rounds_view, short, usable
from pacore_graph.viewer.rows import Json, RowIndex

ANSWER_WIDTH = 160  # characters of an answer the index keeps; the problem's own view has it whole


def run_entry(key: str, answer: str, rounds: list[Json], ttc: int, failures: int) -> Json:
    """A problem's line in the index: its answer (cut), tokens, calls, failures and first-round agreement."""
    first = (rounds or [{}])[0].get("trajectories") or []
    return {
        "key": key,
        "id": key,
        "answer": short(answer, ANSWER_WIDTH),
        "schedule": ",".join(str(r.get("k", "")) for r in rounds),
        "agreement": agreement_line([math_answer(t) if usable(t) else None for t in first]) if first else "",
        "tokens": ttc,
        "calls": sum(int(r.get("k") or 0) for r in rounds),
        "failures": failures,
    }


def failure_count(row: Json) -> int:
    failures = row.get("failures")
    if isinstance(failures, list):
        return len(failures)
    return sum(1 for r in row.get("rounds") or [] for t in r.get("trajectories") or [] if t.get("error"))


class RunsView(FolderView):
    kind = "run"
    title = "PaCoRe run folder"

    def __init__(self, root: Path, run_json: Json | None = None):
        super().__init__(root, run_json)
        self.entries: dict[str, Json] = {}
        self.rows = RowIndex(root / RESULTS_FILE, key=lambda row: str(row["id"]), on_row=self._add)

    @classmethod
    def owns_row(cls, row: Json) -> bool:
        return "id" in row and "rounds" in row

    def _add(self, key: str, row: Json) -> None:
        rounds = [r for r in row.get("rounds") or [] if isinstance(r, dict)]
        self.entries[key] = run_entry(
            key, str(row.get("answer") or ""), rounds, row.get("ttc") or 0, failure_count(row)
        )

    def index(self) -> Json:
        self.rows.refresh()
        notes = row_notes(self.rows)
        return {
            **self.header(),
            "columns": [
                column("id", "problem"),
                column("answer", "answer"),
                column("schedule", "rounds"),
                column("agreement", "round 1 agreement"),
                column("tokens", "tokens", "number"),
                column("calls", "calls", "number"),
                column("failures", "failures", "number"),
            ],
            "problems": [self.entries[key] for key in self.rows.order],
            "summary": None,
            "notes": notes,
        }

    def problem(self, key: str) -> Json | None:
        self.rows.refresh()
        row = self.rows.row(key)
        if row is None:
            return None
        messages = plain_messages(row.get("messages")) or self._solve_messages()
        rounds = [r for r in row.get("rounds") or [] if isinstance(r, dict)]
        facts = [
            ["answer", str(row.get("answer") or "")],
            [
                "effective TTC",
                f"{row.get('ttc', 0):,} completion tokens" + (" (approximate)" if row.get("ttc_approximate") else ""),
            ],
            ["rounds", " → ".join(str(r.get("k")) for r in rounds)],
            ["failed trajectories", str(failure_count(row))],
        ]
        outcome = row.get("outcome") or {}
        if outcome.get("selector") not in (None, "synthesis") or outcome.get("stop"):
            facts.append(
                [
                    "chosen by",
                    f"{outcome.get('selector')}" + (f", stopped: {outcome['stop']}" if outcome.get("stop") else ""),
                ]
            )
        return {
            "key": key,
            "title": key,
            "facts": facts,
            "messages": messages,
            "run": {
                "answer": str(row.get("answer") or ""),
                "rounds": rounds_view(rounds, messages, template=self.template),
            },
        }

    @property
    def template(self) -> str | None:
        found = self.fingerprint.get("template") or self.settings.get("template")
        return found if isinstance(found, str) else None

    def _solve_messages(self) -> list[Json] | None:
        """``pacore solve --output`` keeps its one problem's messages in run.json (unless it was very long)."""
        return plain_messages(self.fingerprint.get("messages")) if len(self.rows.order) == 1 else None
