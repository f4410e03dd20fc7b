"""``pacore swe eval`` output: ``RUN_ID/summary.json`` (swebench's report keys) and per instance
``RUN_ID/MODEL/INSTANCE/{report.json, patch.diff, eval.sh, test_output.txt, run_instance.log}``.

Shown on its own (``pacore view logs/run_evaluation``), and beside a ``swe run`` folder's instances when the
evaluation was written inside that folder (``pacore swe eval ... --output out/swe/eval``).
"""

from __future__ import annotations

import json
from pathlib import Path

from pacore_graph.viewer.folder import FolderView, column
from pacore_graph.viewer.paths import OutsideFolder, folder_name, inside
from pacore_graph.viewer.rows import Json

SUMMARY_FILE = "summary.json"
TEST_CATEGORIES = ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")
LOG_FILES = ("patch.diff", "run_instance.log", "eval.sh", "test_output.txt")
SHOWN_BYTES = 64 * 1024  # of a log, the page gets the last this many bytes (the whole file is served apart)
STATUS_LISTS = (("resolved", "resolved_ids"), ("unresolved", "unresolved_ids"), ("error", "error_ids"))


def eval_summaries(root: Path, depth: int = 1) -> list[tuple[str, Json]]:
    """The evaluations under ``root`` (``root`` itself, or a folder ``depth`` levels down at most): each run's
    folder, relative to ``root`` ("" for ``root``), and its summary, newest last."""
    found: list[tuple[float, str, Json]] = []
    candidates = [root / SUMMARY_FILE]
    level = [root]
    for _ in range(depth + 1):
        level = [child for folder in level for child in _subfolders(folder)]
        candidates += [folder / SUMMARY_FILE for folder in level]
    for path in candidates:
        summary = _summary(root, path)
        if summary is not None:
            found.append((path.stat().st_mtime, path.parent.relative_to(root).as_posix().strip("."), summary))
    return [(relative, summary) for _, relative, summary in sorted(found, key=lambda item: item[0])]


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(child for child in folder.iterdir() if child.is_dir() and not child.name.startswith("."))
    except OSError:
        return []


def _summary(root: Path, path: Path) -> Json | None:
    try:
        inside(root, path.relative_to(root).as_posix())
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, OutsideFolder):
        return None
    if isinstance(summary, dict) and "run_id" in summary and isinstance(summary.get("resolved_ids"), list):
        return summary
    return None


def status_of(summary: Json, instance_id: str) -> str:
    for status, key in STATUS_LISTS:
        if instance_id in (summary.get(key) or []):
            return status
    if instance_id in (summary.get("empty_patch_ids") or []):
        return "empty"
    return "not graded"


class Evaluation:
    """One ``swe eval`` run: its summary and, per instance, its report and logs."""

    def __init__(self, root: Path, relative: str, summary: Json):
        self.root, self.relative, self.summary = root, relative, summary
        self.run_id = str(summary.get("run_id"))

    def instance_ids(self) -> list[str]:
        listed = list(self.summary.get("submitted_ids") or [])
        for _, key in STATUS_LISTS:
            listed += [i for i in self.summary.get(key) or [] if i not in listed]
        return [str(i) for i in listed]

    def folder(self, instance_id: str) -> str | None:
        """The instance's log folder, relative to the viewed folder (one per model name: the first found)."""
        run = self.root / self.relative if self.relative else self.root
        name = folder_name(instance_id)
        for model in _subfolders(run):
            if (model / name).is_dir():
                return (model / name).relative_to(self.root).as_posix()
        return None

    def report(self, instance_id: str) -> Json | None:
        folder = self.folder(instance_id)
        if folder is None:
            return None
        try:
            report = json.loads(inside(self.root, f"{folder}/report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, OutsideFolder):
            return None
        entry = report.get(instance_id) if isinstance(report, dict) else None
        return entry if isinstance(entry, dict) else None

    def tests(self, instance_id: str) -> list[Json]:
        """Every test the report names: its category (FAIL_TO_PASS ...) and whether it passed."""
        report = self.report(instance_id) or {}
        status = report.get("tests_status") or {}
        tests = []
        for category in TEST_CATEGORIES:
            groups = status.get(category) or {}
            for outcome, passed in (("success", True), ("failure", False)):
                tests += [
                    {"name": str(name), "category": category, "passed": passed} for name in groups.get(outcome) or []
                ]
        return tests

    def instance(self, instance_id: str) -> Json:
        """What the page shows of one instance's evaluation: status, tests, the tail of each log."""
        report = self.report(instance_id) or {}
        folder = self.folder(instance_id)
        files = []
        for name in LOG_FILES:
            if folder is None:
                break
            try:
                path = inside(self.root, f"{folder}/{name}")
                size = path.stat().st_size
                with path.open("rb") as handle:
                    handle.seek(max(0, size - SHOWN_BYTES))
                    text = handle.read().decode("utf-8", errors="replace")
            except (OSError, OutsideFolder):
                continue
            files.append(
                {"name": name, "path": f"{folder}/{name}", "size": size, "text": text, "cut": size > SHOWN_BYTES}
            )
        return {
            "run_id": self.run_id,
            "status": status_of(self.summary, instance_id),
            "error": (self.summary.get("errors") or {}).get(instance_id),
            "applied": report.get("patch_successfully_applied"),
            "tests": self.tests(instance_id),
            "files": files,
        }


def test_counts(tests: list[Json], category: str) -> str:
    chosen = [t for t in tests if t["category"] == category]
    return f"{sum(t['passed'] for t in chosen)}/{len(chosen)}" if chosen else ""


class SweEvalView(FolderView):
    kind = "swe-eval"
    title = "pacore swe eval"

    def __init__(self, root: Path, run_json: Json | None = None):
        super().__init__(root, run_json)
        self.evaluations: list[Evaluation] = []

    def _load(self) -> None:
        self.evaluations = [Evaluation(self.root, relative, summary) for relative, summary in eval_summaries(self.root)]

    def _key(self, evaluation: Evaluation, instance_id: str) -> str:
        return instance_id if len(self.evaluations) == 1 else f"{evaluation.run_id}/{instance_id}"

    def index(self) -> Json:
        self._load()
        problems = []
        for evaluation in self.evaluations:
            for instance_id in evaluation.instance_ids():
                tests = evaluation.tests(instance_id)
                status = status_of(evaluation.summary, instance_id)
                problems.append(
                    {
                        "key": self._key(evaluation, instance_id),
                        "id": instance_id,
                        "run": evaluation.run_id,
                        "status": status,
                        "resolved": 1.0 if status == "resolved" else 0.0,
                        "f2p": test_counts(tests, "FAIL_TO_PASS"),
                        "p2p": test_counts(tests, "PASS_TO_PASS"),
                        "error": (evaluation.summary.get("errors") or {}).get(instance_id, "")[:120],
                    }
                )
        columns = [
            column("id", "instance"),
            column("run", "run id"),
            column("status", "status"),
            column("resolved", "resolved", "flag"),
            column("f2p", "FAIL_TO_PASS passed"),
            column("p2p", "PASS_TO_PASS passed"),
            column("error", "error"),
        ]
        header = self.header()
        header["settings"] = [
            [e.run_id, f"{e.summary.get('harness', '')}, {e.relative or '.'}"] for e in self.evaluations
        ]
        return {**header, "columns": columns, "problems": problems, "summary": self._counts(), "notes": []}

    def _counts(self) -> Json:
        names = ["submitted_instances", "completed_instances", "resolved_instances", "unresolved_instances"]
        names += ["empty_patch_instances", "error_instances"]
        rows = [[e.run_id, *(e.summary.get(name) for name in names)] for e in self.evaluations]
        table = {
            "title": "Evaluations",
            "columns": ["run id", "submitted", "completed", "resolved", "unresolved", "empty patch", "error"],
            "rows": rows,
        }
        return {"tables": [table], "chart": None, "notes": []}

    def problem(self, key: str) -> Json | None:
        if not self.evaluations:
            self._load()
        for evaluation in self.evaluations:
            for instance_id in evaluation.instance_ids():
                if self._key(evaluation, instance_id) == key:
                    shown = evaluation.instance(instance_id)
                    facts = [["run id", evaluation.run_id], ["status", shown["status"]]]
                    if shown["error"]:
                        facts.append(["error", str(shown["error"])])
                    return {"key": key, "title": instance_id, "facts": facts, "eval": shown}
        return None
