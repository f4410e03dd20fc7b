"""Which kind of folder this is: the one place that knows every kind of view (each kind's module builds on
:mod:`pacore_graph.viewer.folder`, so the choice among them lives above them all)."""

from __future__ import annotations

import json
from pathlib import Path

from pacore_graph.batch.fingerprint import SETTINGS_FILE
from pacore_graph.batch.results_file import RESULTS_FILE, read_lines
from pacore_graph.errors import UsageError
from pacore_graph.viewer.bench_math import MathView
from pacore_graph.viewer.folder import FolderView
from pacore_graph.viewer.multichallenge import MultiChallengeView
from pacore_graph.viewer.rows import loads
from pacore_graph.viewer.runs import RunsView
from pacore_graph.viewer.swe_eval import SweEvalView, eval_summaries
from pacore_graph.viewer.swe_run import SweRunView


def open_folder(folder: str | Path) -> FolderView:
    """The view of ``folder``, or one line (UsageError) saying why it is not a folder the viewer reads."""
    path = Path(folder)
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder: give the folder a run wrote")
    root = path.resolve()
    if (root / SETTINGS_FILE).is_file():
        try:
            run_json = json.loads((root / SETTINGS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path / SETTINGS_FILE} is not this project's settings file ({exc})") from None
        if not isinstance(run_json, dict):
            raise UsageError(f"{path / SETTINGS_FILE} is not this project's settings file (not a JSON object)")
        kinds: list[type[FolderView]] = [SweRunView, MultiChallengeView, MathView, RunsView]
        kind = _kind_of_rows(root, kinds) or next((k for k in kinds if k.claims(root, run_json)), RunsView)
        return kind(root, run_json)
    if eval_summaries(root):
        return SweEvalView(root)
    raise UsageError(
        f"{path} is not a run folder (it has no {SETTINGS_FILE}, and no swe eval summary.json): "
        "give the folder a run wrote"
    )


def _kind_of_rows(root: Path, kinds: list[type[FolderView]]) -> type[FolderView] | None:
    """The kind whose rows the results file holds (its first whole row), when it has one."""
    if not (root / RESULTS_FILE).is_file():
        return None
    for line in read_lines(root / RESULTS_FILE, loads):
        if not isinstance(line.row, dict):
            break
        found = next((k for k in kinds if k.owns_row(line.row)), None)
        if found is None:
            raise UsageError(
                f"{root / RESULTS_FILE} holds rows the viewer does not know (keys {', '.join(sorted(line.row)[:8])})"
            )
        return found
    return None
