"""A ``pacore bench multichallenge`` folder: one row per (conversation, sample) with the response, its rounds,
the judge's verdict and reason; ``scores.json`` per axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pacore_graph.batch.results_file import RESULTS_FILE
from pacore_graph.viewer.folder import FolderView, column, percent, row_notes
from pacore_graph.viewer.rounds import plain_messages, rounds_view, short
from pacore_graph.viewer.rows import Json, RowIndex
from pacore_graph.viewer.runs import ANSWER_WIDTH


def _key(row: Json) -> str:
    return f"{row['question_id']}#{row['sample']}"


class MultiChallengeView(FolderView):
    kind = "multichallenge"
    title = "pacore bench multichallenge"

    def __init__(self, root: Path, run_json: Json | None = None):
        super().__init__(root, run_json)
        self.entries: dict[str, Json] = {}
        self.rows = RowIndex(root / RESULTS_FILE, key=_key, on_row=self._add)

    @classmethod
    def owns_row(cls, row: Json) -> bool:
        return {"question_id", "axis", "sample"} <= set(row)

    @classmethod
    def claims(cls, root: Path, run_json: Json) -> bool:
        return "judge_prompt" in (run_json.get("fingerprint") or {})

    def _add(self, key: str, row: Json) -> None:
        self.entries[key] = {
            "key": key,
            "id": key,
            "axis": row.get("axis"),
            "answer": short(str(row.get("response") or ""), ANSWER_WIDTH),
            "verdict": row.get("verdict") or "",
            "criteria": row.get("pass_criteria") or "",
            "passed": 1.0 if row.get("passed") else 0.0,
            "tokens": row.get("ttc"),
            "failures": int(row.get("failed_trajectories") or 0),
            "error": short(str(row.get("error") or row.get("judge_error") or ""), 80),
        }

    def index(self) -> Json:
        self.rows.refresh()
        columns = [
            column("id", "conversation#sample"),
            column("axis", "axis"),
            column("answer", "response"),
            column("verdict", "verdict"),
            column("criteria", "pass criteria"),
            column("passed", "passed", "flag"),
            column("tokens", "tokens", "number"),
            column("failures", "failures", "number"),
            column("error", "error"),
        ]
        notes = row_notes(self.rows)
        problems = [self.entries[key] for key in self.rows.order]
        return {**self.header(), "columns": columns, "problems": problems, "summary": self._summary(), "notes": notes}

    def _summary(self) -> Json | None:
        scores = self.read_json("scores.json")
        if not isinstance(scores, dict) or not isinstance(scores.get("axes"), list):
            return None
        axes = [a for a in scores["axes"] if isinstance(a, dict)]
        columns = [
            "axis",
            "conversations",
            "pass@1",
            "official",
            "mean TTC",
            "unfinished",
            "response errors",
            "judge errors",
        ]
        rows = [
            [a.get("axis"), a.get("conversations"), percent(a.get("pass_at_1")), percent(a.get("official"))]
            + [_tokens(a.get("mean_ttc")), a.get("unfinished"), a.get("response_errors"), a.get("judge_errors")]
            for a in axes
        ]
        rows.append(
            ["OVERALL", scores.get("conversations"), percent(scores.get("overall_pass_at_1"))]
            + [percent(scores.get("overall_official")), _tokens(scores.get("mean_ttc")), scores.get("unfinished")]
            + [scores.get("response_errors"), scores.get("judge_errors")]
        )
        points = [
            {"x": a.get("mean_ttc") or 0, "y": a.get("pass_at_1") or 0, "label": a.get("axis")}
            for a in axes
            if a.get("mean_ttc") is not None
        ]
        overall = []
        if scores.get("mean_ttc") is not None and scores.get("overall_pass_at_1") is not None:
            overall = [{"x": scores["mean_ttc"], "y": scores["overall_pass_at_1"], "label": "OVERALL"}]
        chart = {
            "title": "pass@1 against mean effective tokens, per axis",
            "x": {"title": "mean effective tokens per conversation", "log": False},
            "y": {"title": "pass@1", "percent": True},
            "series": [
                {"name": "axes", "points": points, "scatter": True},
                {"name": "overall", "points": overall, "scatter": True},
            ],
        }
        return {
            "tables": [{"title": "MultiChallenge scores", "columns": columns, "rows": rows}],
            "chart": chart,
            "notes": [],
        }

    def problem(self, key: str) -> Json | None:
        self.rows.refresh()
        row = self.rows.row(key)
        if row is None:
            return None
        messages = plain_messages(row.get("messages"))
        rounds = [r for r in row.get("rounds") or [] if isinstance(r, dict)]
        facts = [
            ["axis", str(row.get("axis") or "")],
            ["sample", str(row.get("sample"))],
            ["passed", "yes" if row.get("passed") else "no"],
            ["effective TTC", f"{row.get('ttc') or 0:,} completion tokens"],
        ]
        if row.get("error"):
            facts.append(["response error", str(row["error"])])
        judge = {
            "verdict": row.get("verdict"),
            "pass_criteria": row.get("pass_criteria"),
            "passed": bool(row.get("passed")),
            "reasoning": row.get("judge_reasoning"),
            "target_question": row.get("target_question"),
            "error": row.get("judge_error"),
            "raw": row.get("judge_raw"),
            "attempts": row.get("judge_attempts"),
        }
        template = self.settings.get("template") if isinstance(self.settings.get("template"), str) else None
        return {
            "key": key,
            "title": key,
            "facts": facts,
            "messages": messages,
            "judge": judge,
            "run": {
                "answer": str(row.get("response") or ""),
                "rounds": rounds_view(rounds, messages, template=template),
            },
        }


def _tokens(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.0f}"
