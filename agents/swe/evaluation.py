"""Grade predictions the way swebench does, on images this Docker host already has (offline).

Per instance: a fresh container from the row's image (no network), the model patch applied with
swebench's own sequence of apply commands, the row's ``eval_script`` run (it applies ``test_patch``
itself, so hidden tests only ever enter the evaluation container), and the log graded by swebench's
``get_eval_report``. The folder layout follows swebench's harness:
``OUTPUT/RUN_ID/MODEL/INSTANCE/{patch.diff, eval.sh, test_output.txt, report.json}`` plus
``OUTPUT/RUN_ID/summary.json``. A finished instance (report.json present) is not run again.

For real SWE-bench images on a Docker host with internet use ``run_swebench_harness`` (``pacore swe
eval --harness swebench``), which hands the same predictions to ``swebench.harness.run_evaluation``.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from pacore_agents.swe.tasks import TaskLoadError

CONTAINER_PATCH_FILE = "/tmp/patch.diff"
CONTAINER_EVAL_FILE = "/eval.sh"


class PredictionError(ValueError):
    """The predictions file is unusable; the message names the file and the problem."""


class InstanceResult(BaseModel):
    instance_id: str
    model_name_or_path: str
    status: Literal["resolved", "unresolved", "error"]
    patch_applied: bool = False
    empty_patch: bool = False
    error: str | None = None
    log_dir: str | None = None
    seconds: float = 0.0


class EvalSummary(BaseModel):
    """Counts and id lists under swebench's report key names."""

    run_id: str
    total_instances: int
    submitted_instances: int
    completed_instances: int
    resolved_instances: int
    unresolved_instances: int
    empty_patch_instances: int
    error_instances: int
    submitted_ids: list[str] = Field(default_factory=list)
    completed_ids: list[str] = Field(default_factory=list)
    resolved_ids: list[str] = Field(default_factory=list)
    unresolved_ids: list[str] = Field(default_factory=list)
    empty_patch_ids: list[str] = Field(default_factory=list)
    error_ids: list[str] = Field(default_factory=list)
    errors: dict[str, str] = Field(default_factory=dict)
    harness: str = "pacore-offline"


# ---------------------------------------------------------------------------------------- predictions


def load_predictions(source: str, rows: list[dict]) -> dict[str, dict]:
    """Predictions by instance id from a .jsonl/.json file, or the rows' own patches for ``gold``."""
    if source == "gold":
        return {
            row["instance_id"]: {"instance_id": row["instance_id"], "model_name_or_path": "gold",
                                 "model_patch": row["patch"]}
            for row in rows
        }
    path = Path(source)
    if not path.exists():
        raise PredictionError(f"predictions file {source} does not exist (or pass 'gold')")
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text) if text.strip() else []
            items = list(data.values()) if isinstance(data, dict) else list(data)
        else:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise PredictionError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    predictions: dict[str, dict] = {}
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or "instance_id" not in item or "model_patch" not in item:
            raise PredictionError(f"{source}: prediction {number} needs instance_id and model_patch")
        item.setdefault("model_name_or_path", "model")
        predictions[item["instance_id"]] = item
    known = {row["instance_id"] for row in rows}
    unknown = sorted(set(predictions) - known)
    if unknown:
        raise PredictionError(f"{source}: predictions for instances not in the dataset: {', '.join(unknown)}")
    return predictions


# ---------------------------------------------------------------------------------------- one instance


def evaluate_instance(
    row: dict,
    prediction: dict,
    *,
    run_id: str,
    output_dir: Path,
    timeout: float = 1800,
    memory: str = "4g",
    client=None,
) -> InstanceResult:
    """Grade one prediction in a fresh container; infrastructure failures come back as status "error"."""
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    instance_id = row["instance_id"]
    model = str(prediction.get("model_name_or_path") or "model").replace("/", "__")
    log_dir = output_dir / run_id / model / instance_id
    patch = prediction.get("model_patch") or ""
    result = InstanceResult(instance_id=instance_id, model_name_or_path=model, status="error",
                            empty_patch=not patch.strip(), log_dir=str(log_dir))
    report_path = log_dir / "report.json"
    if report_path.exists():
        return _result_from_report(result, json.loads(report_path.read_text()))
    started = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        test_spec = make_test_spec(row)
        test_output = _run_in_container(row, patch, test_spec.eval_script, log_dir, timeout, memory, client)
        report = get_eval_report(test_spec=test_spec, prediction={**prediction, "model_patch": patch},
                                 test_log_path=str(test_output), include_tests_status=True)
        report_path.write_text(json.dumps(report, indent=4))
        result = _result_from_report(result, report)
    except Exception as exc:  # one broken instance must not stop the run
        result.error = f"{type(exc).__name__}: {exc}"
        (log_dir / "run_instance.log").write_text(result.error + "\n")
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _result_from_report(result: InstanceResult, report: dict) -> InstanceResult:
    entry = report[result.instance_id]
    result.patch_applied = bool(entry.get("patch_successfully_applied"))
    result.status = "resolved" if entry.get("resolved") else "unresolved"
    return result


def _run_in_container(row, patch, eval_script, log_dir: Path, timeout, memory, client) -> Path:
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS

    from pacore_agents.swe.docker_sandbox import DockerSandbox

    apply_commands = _git_apply_commands()
    (log_dir / "patch.diff").write_text(patch)
    (log_dir / "eval.sh").write_text(eval_script)
    test_output = log_dir / "test_output.txt"
    log_lines: list[str] = []
    with DockerSandbox(row, memory=memory, pids=1024, cpus=1.0, client=client) as box:
        if patch.strip():
            box.write_file(CONTAINER_PATCH_FILE, patch)
            applied, last = False, None
            for attempt, command in enumerate(apply_commands):
                if attempt:  # a failed attempt can leave a half-applied tree behind
                    box.run("git checkout -- . ; git clean -fdq", timeout=120)
                last = box.run(f"{command} {CONTAINER_PATCH_FILE}", timeout=300)
                if last.exit_code == 0:
                    applied = True
                    log_lines.append(f"{APPLY_PATCH_PASS} ({command}):\n{last.output}")
                    break
            if not applied:
                log_lines.append(f"{APPLY_PATCH_FAIL}:\n{last.output if last else ''}")
                (log_dir / "run_instance.log").write_text("\n".join(log_lines))
                test_output.write_text(f"{APPLY_PATCH_FAIL}:\n{last.output if last else ''}\n")
                return test_output
        else:
            log_lines.append("empty model patch: the tests run on the unchanged repository")
        box.write_file(CONTAINER_EVAL_FILE, eval_script)
        outcome = box.run(f"/bin/bash {CONTAINER_EVAL_FILE}", timeout=timeout)
    test_output.write_text(outcome.output)
    log_lines.append(f"eval script exit code {outcome.exit_code}")
    (log_dir / "run_instance.log").write_text("\n".join(log_lines) + "\n")
    if outcome.timed_out:
        with test_output.open("a") as handle:
            handle.write(f"\n\nTimeout error: {timeout} seconds exceeded.\n")
        raise TimeoutError(f"tests of {row['instance_id']} timed out after {timeout} s")
    return test_output


def _git_apply_commands() -> list[str]:
    """swebench's own fallback chain (git apply, --3way, --reject, patch --fuzz)."""
    try:
        from swebench.harness.run_evaluation import GIT_APPLY_CMDS

        return list(GIT_APPLY_CMDS)
    except ImportError:  # older swebench layouts
        return ["git apply --verbose", "git apply --verbose --reject", "patch --batch --fuzz=5 -p1 -i"]


# ---------------------------------------------------------------------------------------- a whole run


def evaluate(
    rows: list[dict],
    predictions: dict[str, dict],
    *,
    run_id: str,
    output_dir: Path | str,
    timeout: float = 1800,
    workers: int = 2,
    memory: str = "4g",
    on_result: Callable[[InstanceResult], None] | None = None,
    progress: bool = True,
) -> EvalSummary:
    """Grade every row that has a prediction; write per-instance reports and ``RUN_ID/summary.json``."""
    output_dir = Path(output_dir)
    if not run_id or "/" in run_id:
        raise ValueError(f"run id {run_id!r}: give a non-empty name without '/'")
    submitted = [row for row in rows if row["instance_id"] in predictions]
    results: list[InstanceResult] = []
    if submitted:
        from pacore_agents.swe.images import docker_client, ensure_images

        client = docker_client()
        ensure_images(submitted, client)
        with _progress(progress, len(submitted), run_id) as advance, ThreadPoolExecutor(max(1, workers)) as pool:
            futures = [
                pool.submit(evaluate_instance, row, predictions[row["instance_id"]], run_id=run_id,
                            output_dir=output_dir, timeout=timeout, memory=memory, client=client)
                for row in submitted
            ]
            try:
                for future in as_completed(futures):
                    result = future.result()
                    results.append(result)
                    advance(result)
                    if on_result:
                        on_result(result)
            except KeyboardInterrupt:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    summary = summarize(run_id, rows, predictions, results)
    (output_dir / run_id).mkdir(parents=True, exist_ok=True)
    (output_dir / run_id / "summary.json").write_text(summary.model_dump_json(indent=2))
    return summary


def summarize(run_id: str, rows: list[dict], predictions: dict, results: list[InstanceResult]) -> EvalSummary:
    by_id = {r.instance_id: r for r in results}
    order = [row["instance_id"] for row in rows if row["instance_id"] in by_id]
    pick = [by_id[i] for i in order]
    resolved = [r.instance_id for r in pick if r.status == "resolved"]
    unresolved = [r.instance_id for r in pick if r.status == "unresolved"]
    errors = {r.instance_id: r.error or "" for r in pick if r.status == "error"}
    empty = [r.instance_id for r in pick if r.empty_patch]
    return EvalSummary(
        run_id=run_id,
        total_instances=len(rows),
        submitted_instances=len(order),
        completed_instances=len(resolved) + len(unresolved),
        resolved_instances=len(resolved),
        unresolved_instances=len(unresolved),
        empty_patch_instances=len(empty),
        error_instances=len(errors),
        submitted_ids=order,
        completed_ids=resolved + unresolved,
        resolved_ids=resolved,
        unresolved_ids=unresolved,
        empty_patch_ids=empty,
        error_ids=list(errors),
        errors=errors,
    )


class _progress:
    """A rich progress bar over instances that shows the running resolved count."""

    def __init__(self, enabled: bool, total: int, run_id: str):
        self.enabled, self.total, self.run_id = enabled, total, run_id
        self.resolved = 0

    def __enter__(self):
        if not self.enabled:
            return lambda result: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("[bold]eval {task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("resolved {task.fields[resolved]}"), TimeElapsedColumn())
        self.bar.__enter__()
        self.task = self.bar.add_task(self.run_id, total=self.total, resolved=0)

        def advance(result: InstanceResult) -> None:
            self.resolved += result.status == "resolved"
            self.bar.update(self.task, advance=1, resolved=self.resolved)

        return advance

    def __exit__(self, *exc_info):
        if self.enabled:
            self.bar.__exit__(*exc_info)


# ---------------------------------------------------------------------------------------- real harness


def run_swebench_harness(
    dataset: str,
    rows: list[dict],
    predictions_source: str,
    *,
    run_id: str,
    output_dir: Path | str,
    workers: int = 4,
    timeout: int = 1800,
) -> dict | None:
    """Hand the predictions to swebench's own ``run_evaluation`` (pulls real SWE-bench images, so it
    needs a Docker host with internet). Local rows are passed as a temporary .jsonl with their images
    built first. swebench writes its logs under ./logs/run_evaluation and its report into output_dir."""
    from swebench.harness.run_evaluation import main as swebench_main

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    dataset_name = dataset
    with tempfile.TemporaryDirectory(prefix="pacore-swebench-") as tmp:
        if any(row.get("pacore_task_dir") for row in rows) or not _is_hub_or_file(dataset):
            from pacore_agents.swe.images import ensure_images

            ensure_images(rows)
            dataset_name = str(Path(tmp) / "dataset.jsonl")
            with open(dataset_name, "w") as handle:
                for row in rows:
                    clean = {k: v for k, v in row.items() if k != "pacore_task_dir"}
                    handle.write(json.dumps(clean) + "\n")
        return swebench_main(
            dataset_name=dataset_name,
            split="test",
            instance_ids=[row["instance_id"] for row in rows],
            predictions_path=predictions_source,
            max_workers=workers,
            open_file_limit=4096,
            run_id=run_id,
            timeout=timeout,
            rewrite_reports=False,
            modal=False,
            report_dir=str(output_dir),
        )


def _is_hub_or_file(dataset: str) -> bool:
    path = Path(dataset)
    if path.suffix in (".json", ".jsonl") and path.exists():
        return True
    if path.exists():
        return False  # parquet files and task folders go through a temporary .jsonl
    if "/" in dataset and dataset != "local":
        return True
    raise TaskLoadError(f"dataset {dataset!r} cannot be passed to swebench's harness")
