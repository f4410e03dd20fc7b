"""SWE-bench task rows from wherever they live: a .parquet / .jsonl / .json file, a hub dataset name,
a folder of local tasks, or ``local`` (the suite shipped in this package).

Rows keep swebench's v5 format (``FAIL_TO_PASS`` / ``PASS_TO_PASS`` as JSON strings, ``image``,
``eval_script``, ``log_parser``, ``eval_type``), so swebench's own ``make_test_spec`` and graders take
them unchanged. Local task rows add ``pacore_task_dir``: the folder their image is built from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

LOCAL_SUITE = Path(__file__).with_name("local_tasks")
REQUIRED_KEYS = ("instance_id", "repo", "base_commit", "problem_statement", "image")
HIDDEN_KEYS = ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "eval_script", "hints_text")
EVAL_EOF = "EOF_114329324912"  # the heredoc delimiter swebench's eval scripts use
LOCAL_IMAGE_PREFIX = "pacore-swe.eval."


class TaskLoadError(ValueError):
    """The dataset could not be loaded; the message names the source and what is wrong."""


def load_tasks(dataset: str, *, instances: Iterable[str] | None = None, split: str = "test") -> list[dict[str, Any]]:
    """Rows of ``dataset`` (path, hub name or ``local``), optionally only the given instance ids."""
    rows = _load(dataset, split)
    seen: set[str] = set()
    for row in rows:
        missing = [key for key in REQUIRED_KEYS if not row.get(key)]
        if missing:
            raise TaskLoadError(f"{dataset}: row {row.get('instance_id', '?')!r} lacks {', '.join(missing)}")
        if row["instance_id"] in seen:
            raise TaskLoadError(f"{dataset}: instance {row['instance_id']!r} appears twice")
        seen.add(row["instance_id"])
    if instances:
        wanted = [i for i in instances if i]
        known = {row["instance_id"] for row in rows}
        unknown = [i for i in wanted if i not in known]
        if unknown:
            raise TaskLoadError(f"{dataset}: no such instance(s): {', '.join(unknown)}")
        order = {instance_id: n for n, instance_id in enumerate(wanted)}
        rows = sorted((r for r in rows if r["instance_id"] in order), key=lambda r: order[r["instance_id"]])
    return rows


def _load(dataset: str, split: str) -> list[dict[str, Any]]:
    if dataset == "local":
        return load_local_tasks(LOCAL_SUITE)
    path = Path(dataset).expanduser()
    if path.is_dir():
        return load_local_tasks(path)
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return _read_json(path)
    if path.exists() or dataset.startswith((".", "/")) or "/" not in dataset:
        raise TaskLoadError(
            f"dataset {dataset!r}: expected a .parquet/.jsonl/.json file, a folder of tasks, 'local', "
            "or a hub name like SWE-bench/SWE-bench_Verified"
        )
    return _load_hub(dataset, split)


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise TaskLoadError(f"dataset file {path} does not exist")
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def _read_json(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise TaskLoadError(f"dataset file {path} does not exist")
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        return list(data.values()) if isinstance(data, dict) else list(data)
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TaskLoadError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
    return rows


def _load_hub(name: str, split: str) -> list[dict[str, Any]]:
    hint = "pass a local file instead, e.g. ../shared/data/swebench/verified.parquet"
    try:
        import datasets
    except ImportError as exc:
        raise TaskLoadError(f"loading {name!r} from the hub needs the `datasets` package; {hint}") from exc
    try:
        return [dict(row) for row in datasets.load_dataset(name, split=split)]
    except Exception as exc:  # offline, unknown name, ...: one clear message
        raise TaskLoadError(f"could not load hub dataset {name!r} (split {split!r}): {exc}; {hint}") from exc


# ------------------------------------------------------------------------------------------ local tasks


def load_local_tasks(folder: Path) -> list[dict[str, Any]]:
    """Every task folder (``task.json`` + ``repo/``) under ``folder``, or ``folder`` itself if it is one."""
    folders = [folder] if (folder / "task.json").exists() else sorted(p.parent for p in folder.glob("*/task.json"))
    if not folders:
        raise TaskLoadError(f"{folder}: no task folders (each needs task.json and repo/)")
    return [load_local_task(task_dir) for task_dir in folders]


def load_local_task(task_dir: Path) -> dict[str, Any]:
    """One local task as a complete v5 row; fields left out of task.json are derived."""
    try:
        row = json.loads((task_dir / "task.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TaskLoadError(f"{task_dir / 'task.json'}: {exc}") from exc
    if not (task_dir / "repo").is_dir():
        raise TaskLoadError(f"{task_dir}: no repo/ folder")
    return complete_local_row(row, task_dir)


def complete_local_row(row: dict[str, Any], task_dir: Path) -> dict[str, Any]:
    """Fill ``base_commit``, ``image``, ``eval_script`` and the v5 defaults from the task's files."""
    for key in ("instance_id", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"):
        if key not in row:
            raise TaskLoadError(f"{task_dir / 'task.json'}: missing {key!r}")
    row = dict(row)
    if not row.get("base_commit"):
        from pacore_agents.swe.images import compute_base_commit

        row["base_commit"] = compute_base_commit(task_dir / "repo")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if not isinstance(row[key], str):
            row[key] = json.dumps(row[key])
    row.setdefault("repo", f"pacore/{task_dir.name}")
    row.setdefault("version", "1.0")
    row.setdefault("hints_text", "")
    row.setdefault("created_at", "2025-01-01T00:00:00Z")
    row.setdefault("environment_setup_commit", row["base_commit"])
    row.setdefault("difficulty", "<15 min fix")
    row.setdefault("log_parser", "parse_log_pytest")
    row.setdefault("eval_type", "pass_and_fail")
    row.setdefault("image", f"{LOCAL_IMAGE_PREFIX}{row['instance_id'].lower()}:latest")
    row.setdefault("eval_script", pytest_eval_script(row["base_commit"], row["test_patch"]))
    row["pacore_task_dir"] = str(task_dir.resolve())
    return row


def patched_files(patch: str) -> list[str]:
    """Paths a unified diff touches (the ``b/`` side), in order."""
    return list(dict.fromkeys(re.findall(r"^diff --git a/\S+ b/(\S+)$", patch, re.M)))


def pytest_eval_script(base_commit: str, test_patch: str, workdir: str = "/testbed") -> str:
    """An eval script in swebench's shape: reset the test files, apply test_patch, run pytest -rA
    between swebench's output markers, reset again."""
    tests = " ".join(patched_files(test_patch))
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        f"cd {workdir}",
        f"git config --global --add safe.directory {workdir}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {base_commit}",
        f"git checkout {base_commit} {tests}",
        f"git apply -v - <<'{EVAL_EOF}'",
        test_patch.rstrip("\n"),
        EVAL_EOF,
        ": '>>>>> Start Test Output'",
        f"python3 -m pytest -rA -p no:cacheprovider {tests}",
        ": '>>>>> End Test Output'",
        f"git checkout {base_commit} {tests}",
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ helpers


def listed_tests(row: dict[str, Any], key: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS as a list, whether the row stores JSON text or a list."""
    value = row.get(key) or []
    return json.loads(value) if isinstance(value, str) else list(value)


def public_view(row: dict[str, Any]) -> dict[str, Any]:
    """What an agent may see of a task: no gold patch, no hidden tests, no eval script."""
    return {key: value for key, value in row.items() if key not in HIDDEN_KEYS}


def parse_instances(values: Sequence[str] | None) -> list[str] | None:
    """`--instances a,b c` -> ['a', 'b', 'c']; None when not given."""
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part.strip()]
