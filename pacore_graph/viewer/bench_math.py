"""A ``pacore bench math`` folder: rows per (setting, problem, sample), the pool of first-round trajectories,
and ``summary.json`` (accuracy against effective tokens per setting).

The index has one line per problem with each setting's pass@1; a problem's view lists its rows and draws each
PaCoRe row's rounds (rows of earlier versions kept only their round tokens) and the problem's pool.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, defaultdict
from pathlib import Path

from pacore_graph.batch.results_file import RESULTS_FILE
from pacore_graph.viewer.folder import FolderView, column, percent, row_notes
from pacore_graph.viewer.rounds import agreement_groups, plain_messages, rounds_view, short
from pacore_graph.viewer.rows import Json, RowIndex, loads

POOL_FILE = "pool.jsonl"
METHOD_ORDER = {"single": 0, "vote": 1, "pacore": 2}
# A pool row starts with its problem id and index (PoolStore writes them first): enough to place it unread.
_POOL_PREFIX = re.compile(rb'^\{"problem_id": ("(?:[^"\\]|\\.)*"), "index": (\d+)')


class MathView(FolderView):
    kind = "math"
    title = "pacore bench math"

    def __init__(self, root: Path, run_json: Json | None = None):
        super().__init__(root, run_json)
        self._reset()
        self.rows = RowIndex(root / RESULTS_FILE, key=_row_key, on_row=self._add, on_reset=self._reset)
        self._pool: dict[str, dict[int, tuple[int, int]]] | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def owns_row(cls, row: Json) -> bool:
        return {"label", "problem_id", "sample"} <= set(row)

    @classmethod
    def claims(cls, root: Path, run_json: Json) -> bool:
        return (root / POOL_FILE).exists() or "pool_size" in (run_json.get("fingerprint") or {})

    def _reset(self) -> None:
        """No row seen yet: per problem its graded marks per setting, PaCoRe's tokens, failures and answers."""
        self.correct: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.tokens: dict[str, list[int]] = defaultdict(list)
        self.failures: dict[str, int] = defaultdict(int)
        self.answers: dict[str, Counter[str]] = defaultdict(Counter)
        self.gold: dict[str, str] = {}
        self.units: dict[str, list[str]] = defaultdict(list)  # problem id -> its row keys
        self.labels: dict[str, str] = {}  # label -> method
        self.problems: list[str] = []

    def _add(self, key: str, row: Json) -> None:
        problem = str(row["problem_id"])
        if problem not in self.gold:
            self.problems.append(problem)
        self.gold[problem] = str(row.get("gold", ""))
        self.units[problem].append(key)
        label = str(row["label"])
        self.labels[label] = str(row.get("method", ""))
        self.correct[problem][label].append(float(bool(row.get("correct"))))
        if row.get("method") == "pacore":
            self.tokens[problem].append(int(row.get("ttc") or 0))
            self.failures[problem] += int(row.get("failed_trajectories") or 0)
            if row.get("answer"):
                self.answers[problem][str(row["answer"])] += 1

    def _label_order(self) -> list[str]:
        return sorted(self.labels, key=lambda label: (METHOD_ORDER.get(self.labels[label], 9), label))

    def index(self) -> Json:
        self.rows.refresh()
        labels = self._label_order()
        problems = []
        for problem in self.problems:
            entry: Json = {"key": problem, "id": problem, "gold": short(self.gold[problem], 80)}
            common = self.answers[problem].most_common(1)
            entry["answer"] = short(common[0][0], 80) if common else ""
            for number, label in enumerate(labels):
                marks = self.correct[problem].get(label)
                entry[f"s{number}"] = sum(marks) / len(marks) if marks else None
            tokens = self.tokens[problem]
            entry["tokens"] = round(sum(tokens) / len(tokens)) if tokens else None
            entry["failures"] = self.failures[problem]
            problems.append(entry)
        columns = [column("id", "problem"), column("gold", "gold"), column("answer", "PaCoRe answer")]
        columns += [column(f"s{number}", label, "score") for number, label in enumerate(labels)]
        columns += [column("tokens", "PaCoRe tokens (mean)", "number"), column("failures", "failures", "number")]
        notes = row_notes(self.rows)
        return {**self.header(), "columns": columns, "problems": problems, "summary": self._summary(), "notes": notes}

    def _summary(self) -> Json | None:
        summary = self.read_json("summary.json")
        if not isinstance(summary, dict) or not summary.get("points"):
            return None
        points = [p for p in summary["points"] if isinstance(p, dict)]
        table = {
            "title": "Accuracy against effective test-time compute",
            "columns": ["setting", "accuracy (pass@1)", "mean tokens per problem", "problems", "samples", "ungradable"],
            "rows": [
                [
                    p.get("label"),
                    percent(p.get("accuracy")),
                    round(p.get("ttc") or 0),
                    p.get("problems"),
                    p.get("samples"),
                    p.get("ungradable"),
                ]
                for p in points
            ],
        }
        series: dict[str, list[Json]] = defaultdict(list)
        for p in points:
            series[str(p.get("method", ""))].append(
                {"x": p.get("ttc") or 0, "y": p.get("accuracy") or 0, "label": p.get("label")}
            )
        chart: Json = {
            "title": "Accuracy against effective tokens per problem",
            "x": {"title": "mean effective tokens per problem", "log": True},
            "y": {"title": "accuracy (pass@1)", "percent": True},
            "series": [{"name": name, "points": sorted(pts, key=lambda q: q["x"])} for name, pts in series.items()],
        }
        complete, problems = summary.get("complete_problems", "?"), summary.get("problems", "?")
        notes = [f"{complete} of {problems} problems complete (every setting finished)"]
        return {"tables": [table], "chart": chart, "notes": notes}

    def problem(self, key: str) -> Json | None:
        self.rows.refresh()
        if key not in self.units:
            return None
        rows = [row for row in (self.rows.row(unit) for unit in self.units[key]) if row is not None]
        rows.sort(key=lambda r: (METHOD_ORDER.get(str(r.get("method")), 9), str(r.get("label")), r.get("sample", 0)))
        messages = next((plain_messages(r.get("messages")) for r in rows if r.get("messages")), None)
        units = [self._unit(row, messages) for row in rows]
        pool = self._pool_rows(key)
        return {
            "key": key,
            "title": key,
            "facts": [["gold answer", self.gold.get(key, "")], ["rows", str(len(rows))]],
            "messages": messages,
            "units": units,
            "pool": _pool_view(pool),
        }

    def _unit(self, row: Json, messages: list[Json] | None) -> Json:
        unit: Json = {
            "key": _row_key(row),
            "label": row.get("label"),
            "sample": row.get("sample"),
            "answer": row.get("answer"),
            "correct": bool(row.get("correct")),
            "flag": row.get("flag"),
            "tokens": row.get("ttc"),
            "pool_indices": row.get("pool_indices") or [],
        }
        if row.get("method") == "vote":
            unit["votes"] = row.get("votes")
        if row.get("method") == "pacore":
            rounds = [r for r in row.get("records") or [] if isinstance(r, dict)]
            if rounds:
                unit["run"] = {"answer": str(row.get("conclusion") or ""), "rounds": rounds_view(rounds, messages)}
            else:  # rows of earlier versions: round tokens only
                unit["round_tokens"] = row.get("round_tokens") or []
                unit["conclusion"] = str(row.get("conclusion") or "")
        return unit

    def part(self, key: str, name: str) -> str | None:
        """``pool-reasoning-N``: the reasoning of the problem's pool trajectory N."""
        found = re.fullmatch(r"pool-reasoning-(\d+)", name)
        if not found:
            return None
        for row in self._pool_rows(key):
            if row.get("index") == int(found.group(1)):
                return str(row.get("reasoning") or "")
        return None

    # -- the pool: placed by a scan of each row's first bytes, read one problem at a time ----------------------
    def _pool_rows(self, problem: str) -> list[Json]:
        path = self.root / POOL_FILE
        if not path.is_file():
            return []
        with self._pool_lock:
            if self._pool is None:
                self._pool = _place_pool(path)
            places = self._pool.get(problem, {})
        rows = []
        with path.open("rb") as handle:
            for index in sorted(places):
                offset, size = places[index]
                handle.seek(offset)
                try:
                    rows.append(loads(handle.read(size)))
                except ValueError:
                    continue
        return rows


def _row_key(row: Json) -> str:
    return f"{row['label']}|{row['problem_id']}|{row['sample']}"


def _place_pool(path: Path) -> dict[str, dict[int, tuple[int, int]]]:
    """Problem id -> pool index -> (offset, size) of its row, from each line's first bytes."""
    import json

    places: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    offset = 0
    with path.open("rb") as handle:
        for raw in handle:
            found = _POOL_PREFIX.match(raw)
            if found and raw.endswith(b"\n"):
                places[json.loads(found.group(1))][int(found.group(2))] = (offset, len(raw))
            offset += len(raw)
    return dict(places)


def _pool_view(rows: list[Json]) -> Json | None:
    """The problem's pool as a grid: each trajectory's tokens, graded answer and finish reason."""
    if not rows:
        return None
    answers = [str(r["answer"]) if r.get("answer") else None for r in rows]
    groups, group_of = agreement_groups(answers)
    cells = []
    for row, answer in zip(rows, answers, strict=True):
        cell: Json = {
            "index": row.get("index"),
            "tokens": int(row.get("completion_tokens") or 0),
            "prompt_tokens": int(row.get("prompt_tokens") or 0),
            "finish": row.get("finish_reason"),
            "answer": answer,
            "group": group_of.get(answer) if answer else None,
            "usable": bool(str(row.get("content") or "").strip()),
            "correct": bool(row.get("correct")),
            "flag": row.get("flag"),
            "conclusion": str(row.get("content") or ""),
        }
        if row.get("reasoning"):  # often far longer than the rest: loaded when asked for (``part``)
            cell["reasoning_chars"] = len(str(row["reasoning"]))
        cells.append(cell)
    return {"groups": groups, "trajectories": cells}
