"""A ``pacore swe run`` folder: ``results.jsonl`` (a row per finished instance), ``trajectories/ID.json`` (every
round and episode of an instance: messages, tool calls, outputs, tokens, patches, sandbox and notes) and
``predictions.jsonl``. An evaluation written inside the folder (``pacore swe eval --output FOLDER/eval``) is
shown beside each instance: its status and each test's result.

Episodes may name the ``host`` that ran them, and a trajectory file may list ``moves`` (episodes moved off a lost
host: episode, from, to, reason); both are shown when present.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pacore_graph.batch.results_file import RESULTS_FILE
from pacore_graph.viewer.folder import FolderView, column, row_notes
from pacore_graph.viewer.paths import OutsideFolder, folder_name
from pacore_graph.viewer.rounds import rounds_view
from pacore_graph.viewer.rows import Json, RowIndex, loads
from pacore_graph.viewer.swe_eval import Evaluation, eval_summaries, status_of

TRAJECTORY_DIR = "trajectories"
_DIFF = re.compile(r"```diff\n(.*?)```", re.DOTALL)


def patch_of(record: Json) -> str:
    """The patch an episode's conclusion passed on (``Patch: ```diff ...```\\n\\nNote: ...``), without its note."""
    conclusion = str(record.get("conclusion") or "")
    found = _DIFF.search(conclusion)
    return (found.group(1) if found else conclusion).strip()


def patch_label(patch: str) -> str:
    """A patch in a few characters: lines added and removed."""
    lines = patch.splitlines()
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    return f"+{added} −{removed}"


class SweRunView(FolderView):
    kind = "swe-run"
    title = "pacore swe run"

    def __init__(self, root: Path, run_json: Json | None = None):
        super().__init__(root, run_json)
        self.entries: dict[str, Json] = {}
        self.rows = RowIndex(root / RESULTS_FILE, key=lambda row: str(row["instance_id"]), on_row=self._add)
        self.evaluations: list[Evaluation] = []

    @classmethod
    def owns_row(cls, row: Json) -> bool:
        return "instance_id" in row

    @classmethod
    def claims(cls, root: Path, run_json: Json) -> bool:
        return (root / TRAJECTORY_DIR).is_dir() or "patch_cap" in (run_json.get("fingerprint") or {})

    def _add(self, key: str, row: Json) -> None:
        self.entries[key] = {
            "key": key,
            "id": key,
            "patch": "yes" if row.get("patch") else "empty",
            "tokens": row.get("ttc"),
            "episodes": row.get("episodes"),
            "error": str(row.get("error") or "")[:120],
        }

    def _unfinished(self) -> list[Json]:
        """Instances with a trajectory file and no row: every episode crashed (the next run retries them)."""
        folder = self.root / TRAJECTORY_DIR
        if not folder.is_dir():
            return []
        named = {folder_name(key) for key in self.entries}
        entries = []
        for path in sorted(folder.glob("*.json")):
            if path.stem in named:
                continue
            trajectory = self._trajectory_file(path.name)
            if not isinstance(trajectory, dict) or "instance_id" not in trajectory:
                continue
            key = str(trajectory["instance_id"])
            entries.append(
                {
                    "key": key,
                    "id": key,
                    "patch": "none (failed)",
                    "tokens": trajectory.get("ttc"),
                    "episodes": len(trajectory.get("episodes") or []),
                    "error": str(trajectory.get("error") or "")[:120],
                }
            )
        return entries

    def index(self) -> Json:
        self.rows.refresh()
        self.evaluations = [Evaluation(self.root, rel, summary) for rel, summary in eval_summaries(self.root)]
        problems = [dict(self.entries[key]) for key in self.rows.order] + self._unfinished()
        for entry in problems:
            evaluation = self._evaluation_of(entry["key"])
            entry["eval"] = status_of(evaluation.summary, entry["key"]) if evaluation else ""
            entry["resolved"] = (1.0 if entry["eval"] == "resolved" else 0.0) if evaluation else None
        columns = [
            column("id", "instance"),
            column("patch", "patch"),
            column("eval", "evaluation"),
            column("resolved", "resolved", "flag"),
            column("tokens", "tokens", "number"),
            column("episodes", "episodes", "number"),
            column("error", "error"),
        ]
        notes = row_notes(self.rows)
        if self.evaluations:
            notes.append("evaluations: " + ", ".join(f"{e.run_id} ({e.relative})" for e in self.evaluations))
        return {**self.header(), "columns": columns, "problems": problems, "summary": None, "notes": notes}

    def _evaluation_of(self, instance_id: str) -> Evaluation | None:
        """The newest evaluation in the folder that graded the instance."""
        for evaluation in reversed(self.evaluations):
            if instance_id in evaluation.instance_ids():
                return evaluation
        return None

    def _trajectory_file(self, name: str) -> Any:
        try:
            return loads(self.path(f"{TRAJECTORY_DIR}/{name}").read_bytes())
        except (OSError, ValueError, OutsideFolder):
            return None

    def problem(self, key: str) -> Json | None:
        trajectory = self._trajectory_file(f"{folder_name(key)}.json")
        if not isinstance(trajectory, dict) or str(trajectory.get("instance_id")) != key:
            return None
        if not self.evaluations:
            self.evaluations = [Evaluation(self.root, rel, summary) for rel, summary in eval_summaries(self.root)]
        episodes = {
            (e.get("round_index"), e.get("index")): e for e in trajectory.get("episodes") or [] if isinstance(e, dict)
        }
        rounds = [r for r in trajectory.get("rounds") or [] if isinstance(r, dict)]
        shown = rounds_view(rounds, answer_of=patch_of, rebuild_prompts=False)
        for round_, record in zip(shown, rounds, strict=True):
            for cell in round_["trajectories"]:
                episode = episodes.pop((record.get("round_index"), cell["index"]), None)
                if cell.get("answer") is not None:
                    cell["answer"] = patch_label(cell["answer"])
                if episode is not None:
                    cell["episode"] = _episode(episode)
        orphans = [
            _episode(e) | {"round_index": e.get("round_index"), "index": e.get("index")} for e in episodes.values()
        ]
        facts = [
            ["model", str(trajectory.get("model_name_or_path") or "")],
            [
                "patch kept",
                patch_label(str(trajectory.get("model_patch") or "")) if trajectory.get("model_patch") else "none",
            ],
            ["effective TTC", f"{trajectory.get('ttc') or 0:,} completion tokens"],
            ["episodes", f"{len(trajectory.get('episodes') or [])}, {trajectory.get('seconds') or 0:,.0f} s in all"],
        ]
        hosts = trajectory.get("hosts")
        if isinstance(hosts, dict) and hosts:  # sandboxes on several hosts (`--runtime swerex`)
            per_host = ", ".join(f"{name} {count}" for name, count in hosts.items())
            moved = len(trajectory.get("moves") or [])
            facts.append(["episodes per host", per_host + (f"; {moved} moved off a lost host" if moved else "")])
        if trajectory.get("error"):
            facts.append(["error", str(trajectory["error"])])
        swe: Json = {
            "patch": str(trajectory.get("model_patch") or ""),
            "note": str(trajectory.get("note") or ""),
            "moves": [m for m in trajectory.get("moves") or [] if isinstance(m, dict)],
            "unplaced": orphans,  # episodes of no recorded round (a round that failed before its record)
        }
        evaluation = self._evaluation_of(key)
        problem: Json = {
            "key": key,
            "title": key,
            "facts": facts,
            "swe": swe,
            "run": {"answer": swe["patch"], "rounds": shown},
        }
        if evaluation is not None:
            problem["eval"] = evaluation.instance(key)
        return problem


def _episode(record: Json) -> Json:
    """An episode as the page shows it: how it ended, its steps (messages), patch, note, sandbox and host."""
    episode = {
        name: record.get(name)
        for name in ("stop_reason", "steps", "patch", "note", "error", "seconds", "sandbox", "host", "sandbox_notes")
        if record.get(name) not in (None, "", [])
    }
    episode["prompt_tokens"] = record.get("prompt_tokens") or 0
    episode["completion_tokens"] = record.get("completion_tokens") or 0
    episode["messages"] = [_message(m) for m in record.get("messages") or [] if isinstance(m, dict)]
    return episode


def _message(message: Json) -> Json:
    shown: Json = {"role": str(message.get("role", "")), "content": str(message.get("content") or "")}
    for name in ("tool_calls", "tool_call_id", "reasoning", "pacore"):
        if message.get(name):
            shown[name] = message[name]
    if isinstance(message.get("usage"), dict):
        shown["tokens"] = message["usage"].get("output_tokens")
    return shown
