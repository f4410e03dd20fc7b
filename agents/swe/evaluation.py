"""Grade predictions the way swebench does, on images this Docker host already has (offline).

Per instance: a fresh container from the row's image (no network), the model patch applied with
swebench's own sequence of apply commands, the row's ``eval_script`` run (it applies ``test_patch``
itself, so hidden tests only ever enter the evaluation container), and the log graded by swebench's
``get_eval_report``. Counts follow swebench's ``make_run_report`` (see ``EvalSummary``). The folder
layout follows swebench's harness: ``OUTPUT/RUN_ID/MODEL/INSTANCE/{patch.diff, eval.sh,
test_output.txt (whole), run_instance.log, report.json}`` plus ``OUTPUT/RUN_ID/summary.json``, each
name made safe by ``output_paths.folder_name`` (ids and model names cannot leave OUTPUT). A stored
report is reused only when ``grading.json`` beside it shows the same patch, test spec and harness (the
summary lists it under ``reused_ids``); any other stored report is graded again (``regraded_ids``). One
evaluation at a time writes into an OUTPUT folder: ``pacore swe eval`` holds its lock (``OUTPUT/.lock``,
the same lock as ``pacore swe run``'s folders).

For real SWE-bench images on a Docker host with internet use ``run_swebench_harness`` (``pacore swe
eval --harness swebench``), which hands the same predictions to ``swebench.harness.run_evaluation``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from pacore_agents.swe.output_paths import inside
from pacore_agents.swe.rex_sandbox import HostLost
from pacore_agents.swe.tasks import TaskLoadError

if TYPE_CHECKING:
    from docker import DockerClient
    from swebench.types import TestSpec

    from pacore_agents.swe.sandbox import BaseSandbox

CONTAINER_PATCH_FILE = "/tmp/patch.diff"
GRADING_FILE = "grading.json"  # what a stored report was graded from: patch, test spec, harness
HARNESS = "pacore-offline/2"  # bump when the way an instance is run or graded changes
CONTAINER_EVAL_FILE = "/eval.sh"
MAX_HOSTS_LOST = 3  # sandbox hosts an instance's grading may lose (--runtime swerex) before it is an error
NO_PATCH = "no-patch"  # predictions source: run every instance's tests with no patch (swebench's skip_patch)


class PredictionError(ValueError):
    """The predictions file is unusable; the message names the file and the problem."""


class InstanceResult(BaseModel):
    instance_id: str
    model_name_or_path: str
    status: Literal["resolved", "unresolved", "error", "empty"]
    patch_applied: bool = False
    patch_is_None: bool = False  # noqa: N815 - swebench's report key
    error: str | None = None
    log_dir: str | None = None
    seconds: float = 0.0
    reused: bool = False  # a stored report of the same patch, test spec and harness
    regraded: bool = False  # a stored report was found, made from another patch, test spec or harness


class EvalSummary(BaseModel):
    """Counts and id lists under swebench's report key names, counted as its ``make_run_report`` does:
    an empty or null patch is only *empty* (never run), a patch that does not apply is an *error*,
    *completed* means graded (resolved or not)."""

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
    reused_ids: list[str] = Field(
        default_factory=list, description="stored reports reused: same patch, tests and harness"
    )
    regraded_ids: list[str] = Field(
        default_factory=list, description="stored reports graded again: their patch, tests or harness differed"
    )
    errors: dict[str, str] = Field(default_factory=dict)
    harness: str = "pacore-offline"


# ---------------------------------------------------------------------------------------- predictions


def load_predictions(source: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Predictions by instance id from a .jsonl/.json file; ``gold``: the rows' own patches; ``no-patch``:
    no patch at all (grade with ``skip_patch=True``: the tests run on the unchanged repository)."""
    if source in ("gold", NO_PATCH):
        return {
            row["instance_id"]: {
                "instance_id": row["instance_id"],
                "model_name_or_path": source,
                "model_patch": row["patch"] if source == "gold" else "",
            }
            for row in rows
        }
    path = Path(source)
    if not path.is_file():
        raise PredictionError(f"predictions file {source} does not exist (or pass 'gold' or '{NO_PATCH}')")
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text) if text.strip() else []
            items = list(data.values()) if isinstance(data, dict) else data
        else:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise PredictionError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(items, list):
        raise PredictionError(f"{source}: expected a list of predictions or an object keyed by instance id")
    predictions: dict[str, dict[str, Any]] = {}
    first_seen: dict[str, int] = {}
    for number, item in enumerate(items, 1):
        _check_prediction(source, number, item)
        instance_id = item["instance_id"]
        if instance_id in first_seen:
            raise PredictionError(
                f"{source}: predictions {first_seen[instance_id]} and {number} are both for {instance_id!r}: keep one"
            )
        first_seen[instance_id] = number
        item.setdefault("model_name_or_path", "None")  # what swebench names a prediction without one
        predictions[instance_id] = item
    known = {row["instance_id"] for row in rows}
    unknown = sorted(set(predictions) - known)
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        shown = ", ".join(repr(i[:80]) for i in unknown[:5]) + more
        raise PredictionError(f"{source}: predictions for instances not in the dataset: {shown}")
    return predictions


def _check_prediction(source: str, number: int, item: object) -> None:
    if not isinstance(item, dict) or "instance_id" not in item or "model_patch" not in item:
        raise PredictionError(f"{source}: prediction {number} needs instance_id and model_patch")
    if not isinstance(item["instance_id"], str) or not item["instance_id"]:
        raise PredictionError(f"{source}: prediction {number}: instance_id must be a non-empty string")
    if item["model_patch"] is not None and not isinstance(item["model_patch"], str):
        raise PredictionError(f"{source}: prediction {number}: model_patch must be a string or null")
    if not isinstance(item.get("model_name_or_path", ""), str):
        raise PredictionError(f"{source}: prediction {number}: model_name_or_path must be a string")


# ---------------------------------------------------------------------------------------- one instance


def evaluate_instance(
    row: dict[str, Any],
    prediction: dict[str, Any],
    *,
    run_id: str,
    output_dir: Path,
    timeout: float = 1800,
    memory: str = "4g",
    client: DockerClient | None = None,
    skip_patch: bool = False,
    open_sandbox: Callable[[dict[str, Any]], BaseSandbox] | None = None,
) -> InstanceResult:
    """Grade one prediction in a fresh container; infrastructure failures come back as status "error".

    As swebench: an empty or null patch is not run (status "empty"), unless ``skip_patch`` asks for the
    tests on the unchanged repository; a patch that no apply command takes is an error, not a result.
    """
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    instance_id = row["instance_id"]
    model = prediction["model_name_or_path"]
    log_dir = inside(output_dir, run_id, model, instance_id)
    patch = prediction["model_patch"]
    result = InstanceResult(
        instance_id=instance_id,
        model_name_or_path=model,
        status="error",
        patch_is_None=patch is None,
        log_dir=str(log_dir),
    )
    if patch in ("", None) and not skip_patch:
        result.status = "empty"
        return result
    report_path, grading_path = log_dir / "report.json", log_dir / GRADING_FILE
    started = time.monotonic()
    try:
        test_spec = make_test_spec(row)
        grading = grading_key(row, test_spec, None if skip_patch else patch)
        if report_path.exists():
            if _read_json(grading_path) == grading:
                result.reused = True
                return _result_from_report(result, json.loads(report_path.read_text()))
            result.regraded = True
            grading_path.unlink(missing_ok=True)  # the report left beside it is not this patch's
        log_dir.mkdir(parents=True, exist_ok=True)
        test_output = log_dir / "test_output.txt"
        for attempt in range(MAX_HOSTS_LOST + 1):
            try:
                test_output = _run_in_container(
                    row,
                    None if skip_patch else patch,
                    test_spec.eval_script,
                    log_dir,
                    timeout,
                    memory,
                    client,
                    open_sandbox,
                )
                break
            except HostLost:  # graded again from the start on another host (grading is idempotent)
                if attempt == MAX_HOSTS_LOST:
                    raise
        report = get_eval_report(
            test_spec=test_spec,
            prediction={**prediction, "model_patch": patch or ""},
            test_log_path=str(test_output),
            include_tests_status=True,
        )
        report_path.write_text(json.dumps(report, indent=4))
        grading_path.write_text(json.dumps(grading, indent=2))
        result = _result_from_report(result, report)
    except Exception as exc:  # one broken instance must not stop the run
        result.error = f"{type(exc).__name__}: {exc}"
        with (log_dir / "run_instance.log").open("a") as handle:
            handle.write(result.error + "\n")
    result.seconds = round(time.monotonic() - started, 2)
    return result


def grading_key(row: dict[str, Any], test_spec: TestSpec, patch: str | None) -> dict[str, str]:
    """What a report depends on: the patch (None: the tests on the unchanged repository), the test spec (eval
    script, the tests that must pass, the image) and this harness with its swebench version."""
    import swebench

    spec = json.dumps([test_spec.eval_script, test_spec.FAIL_TO_PASS, test_spec.PASS_TO_PASS, row.get("image")])
    return {
        "patch_sha256": "skip-patch" if patch is None else hashlib.sha256(patch.encode()).hexdigest(),
        "test_spec_sha256": hashlib.sha256(spec.encode()).hexdigest(),
        "harness": f"{HARNESS} swebench/{swebench.__version__}",
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _result_from_report(result: InstanceResult, report: dict[str, Any]) -> InstanceResult:
    entry = report[result.instance_id]
    result.patch_applied = bool(entry.get("patch_successfully_applied"))
    result.status = "resolved" if entry.get("resolved") else "unresolved"
    return result


class PatchApplyError(RuntimeError):
    """No command of swebench's apply chain took the patch (swebench: an error instance)."""


def _run_in_container(
    row: dict[str, Any],
    patch: str | None,
    eval_script: str,
    log_dir: Path,
    timeout: float,
    memory: str,
    client: DockerClient | None,
    open_sandbox: Callable[[dict[str, Any]], BaseSandbox] | None = None,
) -> Path:
    """Apply ``patch`` (None: skip) and run the eval script; the test output is kept whole in a file."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS

    from pacore_agents.swe.docker_sandbox import DockerSandbox

    (log_dir / "eval.sh").write_text(eval_script)
    test_output = log_dir / "test_output.txt"
    log_lines: list[str] = []
    opened = (
        open_sandbox(row) if open_sandbox else DockerSandbox(row, memory=memory, pids=1024, cpus=1.0, client=client)
    )
    with opened as box:
        if patch is None:
            log_lines.append("no patch applied (skip_patch): the tests run on the unchanged repository")
        else:
            (log_dir / "patch.diff").write_text(patch)
            box.write_file(CONTAINER_PATCH_FILE, patch)
            applied, outputs = _apply(box)
            log_lines += outputs
            if not applied:
                log_lines.append(APPLY_PATCH_FAIL)
                (log_dir / "run_instance.log").write_text("\n".join(log_lines) + "\n")
                raise PatchApplyError(f"{APPLY_PATCH_FAIL}: no command of swebench's apply chain took the patch")
            log_lines.append(f"{APPLY_PATCH_PASS} ({applied})")
        box.write_file(CONTAINER_EVAL_FILE, eval_script)
        outcome = box.run_to_file(f"/bin/bash {CONTAINER_EVAL_FILE}", test_output, timeout=timeout)
    log_lines.append(f"eval script exit code {outcome.exit_code}")
    (log_dir / "run_instance.log").write_text("\n".join(log_lines) + "\n")
    if outcome.timed_out:
        with test_output.open("a") as handle:
            handle.write(f"\n\nTimeout error: {timeout} seconds exceeded.\n")
        raise TimeoutError(f"tests of {row['instance_id']} timed out after {timeout} s")
    return test_output


def _apply(box: BaseSandbox) -> tuple[str | None, list[str]]:
    """swebench's apply chain, a clean tree before each retry, then its reverse check (a chain can leave the
    patch applied while every command exits non-zero). Returns the command that took it, and the log."""
    outputs = []
    for attempt, command in enumerate(_git_apply_commands()):
        if attempt:  # a failed attempt (notably --reject) can leave a half-applied tree behind
            box.run("git checkout -- . ; git clean -fd", timeout=120)
        done = box.run(f"{command} {CONTAINER_PATCH_FILE}", timeout=300)
        outputs.append(f"$ {command} {CONTAINER_PATCH_FILE}  (exit {done.exit_code})\n{done.output}")
        if done.exit_code == 0:
            return command, outputs
    check = f"git apply --check --reverse {CONTAINER_PATCH_FILE}"
    done = box.run(check, timeout=120)
    outputs.append(f"$ {check}  (exit {done.exit_code})\n{done.output}")
    return (check if done.exit_code == 0 else None), outputs


def _git_apply_commands() -> list[str]:
    """swebench's own fallback chain (git apply, --3way, --reject, patch --fuzz)."""
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    return list(GIT_APPLY_CMDS)


# ---------------------------------------------------------------------------------------- a whole run


def evaluate(
    rows: list[dict[str, Any]],
    predictions: dict[str, dict[str, Any]],
    *,
    run_id: str,
    output_dir: Path | str,
    timeout: float = 1800,
    workers: int = 2,
    memory: str = "4g",
    skip_patch: bool = False,
    open_sandbox: Callable[[dict[str, Any]], BaseSandbox] | None = None,
    on_result: Callable[[InstanceResult], None] | None = None,
    progress: bool = True,
) -> EvalSummary:
    """Grade every row that has a prediction; write per-instance reports and ``RUN_ID/summary.json``.

    ``predictions`` may hold instances beyond ``rows`` (a file graded for some instances only): they
    count as submitted, as in swebench's report, and are not run.
    """
    output_dir = Path(output_dir)
    if not run_id:
        raise ValueError("give a non-empty run id")
    submitted = [row for row in rows if row["instance_id"] in predictions]
    results: list[InstanceResult] = []
    if submitted:
        from pacore_agents.swe.images import docker_client, ensure_images

        client = None
        if open_sandbox is None:  # else the hosts have the images (pacore swe eval --runtime swerex checks)
            client = docker_client()
            ensure_images(submitted, client)
        with _progress(progress, len(submitted), run_id) as advance, ThreadPoolExecutor(max(1, workers)) as pool:
            futures = [
                pool.submit(
                    evaluate_instance,
                    row,
                    predictions[row["instance_id"]],
                    run_id=run_id,
                    output_dir=output_dir,
                    timeout=timeout,
                    memory=memory,
                    client=client,
                    skip_patch=skip_patch,
                    open_sandbox=open_sandbox,
                )
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
    summary_path = inside(output_dir, run_id) / "summary.json"
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.write_text(summary.model_dump_json(indent=2))
    return summary


def summarize(
    run_id: str, rows: list[dict[str, Any]], predictions: dict[str, Any], results: list[InstanceResult]
) -> EvalSummary:
    by_status: dict[str, list[str]] = {"resolved": [], "unresolved": [], "error": [], "empty": []}
    for result in results:
        by_status[result.status].append(result.instance_id)
    resolved, unresolved, errors, empty = (
        sorted(by_status[key]) for key in ("resolved", "unresolved", "error", "empty")
    )
    completed = sorted(resolved + unresolved)
    return EvalSummary(
        run_id=run_id,
        total_instances=len(rows),
        submitted_instances=len(predictions),
        completed_instances=len(completed),
        resolved_instances=len(resolved),
        unresolved_instances=len(unresolved),
        empty_patch_instances=len(empty),
        error_instances=len(errors),
        submitted_ids=sorted(predictions),
        completed_ids=completed,
        resolved_ids=resolved,
        unresolved_ids=unresolved,
        empty_patch_ids=empty,
        error_ids=errors,
        reused_ids=sorted(r.instance_id for r in results if r.reused),
        regraded_ids=sorted(r.instance_id for r in results if r.regraded),
        errors={r.instance_id: r.error or "" for r in results if r.status == "error"},
    )


class _progress:
    """A rich progress bar over instances that shows the running resolved count."""

    def __init__(self, enabled: bool, total: int, run_id: str):
        self.enabled, self.total, self.run_id = enabled, total, run_id
        self.resolved = 0

    def __enter__(self) -> Callable[[InstanceResult], None]:
        if not self.enabled:
            return lambda result: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("[bold]eval {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("resolved {task.fields[resolved]}"),
            TimeElapsedColumn(),
        )
        self.bar.__enter__()
        self.task = self.bar.add_task(self.run_id, total=self.total, resolved=0)

        def advance(result: InstanceResult) -> None:
            self.resolved += result.status == "resolved"
            self.bar.update(self.task, advance=1, resolved=self.resolved)

        return advance

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            self.bar.__exit__(*exc_info)


# ---------------------------------------------------------------------------------------- real harness


def run_swebench_harness(
    dataset: str,
    rows: list[dict[str, Any]],
    predictions_source: str,
    *,
    run_id: str,
    output_dir: Path | str,
    workers: int = 4,
    timeout: int = 1800,
) -> Path:
    """Hand the predictions to swebench's own ``run_evaluation`` (pulls real SWE-bench images, so it
    needs a Docker host with internet). Local rows are passed as a temporary .jsonl with their images
    built first. swebench writes its logs under ./logs/run_evaluation and its report into output_dir; the
    report file's path is returned."""
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
        report: Path = swebench_main(
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
    return report


def _is_hub_or_file(dataset: str) -> bool:
    path = Path(dataset)
    if path.suffix in (".json", ".jsonl") and path.exists():
        return True
    if path.exists():
        return False  # parquet files and task folders go through a temporary .jsonl
    if "/" in dataset and dataset != "local":
        return True
    raise TaskLoadError(f"dataset {dataset!r} cannot be passed to swebench's harness")
