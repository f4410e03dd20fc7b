"""A SWE run: PaCoRe over repair episodes for many instances, on the batch engine (``pacore_graph.RunFolder``).

Output folder (besides the engine's ``run.json``, ``.lock``, ``checkpoints.sqlite`` and ``records/``):
    predictions.jsonl          swebench's format (``instance_id``, ``model_name_or_path``, ``model_patch``),
                               one line per finished instance, appended and fsynced
    results.jsonl              the engine's row per finished instance: patch or not, error, TTC, episodes
    trajectories/ID.json       every round and episode of an instance: messages, tool calls, outputs,
                               tokens, patches, notes, errors (written when the instance ends)

An instance whose episodes all crashed (no daemon, missing image, server down) gets a trajectory file
with the error but no prediction, so the next run into the same folder tries it again; finished
instances are skipped. A run killed mid-instance resumes it: episodes that had finished are neither run
nor lost (their records come back from ``records/``, their conclusions from the checkpoint).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pacore_agents.swe.episodes import DEFAULT_PATCH_CAP, InstanceOutcome, SweSolver
from pacore_agents.swe.output_paths import folder_name, inside
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_graph import PaCoReConfig, RunFolder
from pacore_graph.command_kit import item_counts
from pacore_graph.extend import ProblemOutcome, RunProgress, RunSummary, write_json_atomically

PREDICTIONS_FILE = "predictions.jsonl"
TRAJECTORY_DIR = "trajectories"


def trajectory_path(output: Path, instance_id: str) -> Path:
    """Inside ``output`` whatever the id (``output_paths.folder_name``: distinct ids, distinct files)."""
    return inside(output, TRAJECTORY_DIR) / f"{folder_name(instance_id)}.json"


def swe_folder(
    output: Path,
    model_name: str,
    config: PaCoReConfig,
    repair: RepairSettings,
    *,
    patch_cap: int = DEFAULT_PATCH_CAP,
    protocol: str = "episodes",
    settings: dict[str, Any] | None = None,
    progress: RunProgress | bool = True,
) -> RunFolder:
    """The run's folder, for a solver made with the same ``config``, ``repair`` settings and ``patch_cap``.

    Its fingerprint is what the predictions depend on: the model, the protocol (``episodes`` or
    ``per-call``), the schedule and what an episode does (its settings but threads and retries); a folder
    made with others is refused. Call ``claim()`` on it before anything is spent (image builds, a server)
    to refuse a folder in use at once.
    """
    fingerprint = {
        "model": model_name,
        "protocol": protocol,
        "rounds": config.rounds,
        "episode": repair.model_dump(mode="json", exclude={"threads", "retry"}),
        "patch_cap": patch_cap,
    }
    return RunFolder(  # predictions.jsonl follows the rows: another schedule is another folder, not an escalation
        output,
        fingerprint=fingerprint,
        settings=settings,
        key=lambda row: row["instance_id"],
        progress=progress,
        escalation=False,
    )


async def run_instances(
    rows: list[dict[str, Any]], solver: SweSolver, folder: RunFolder, *, workers: int = 1
) -> RunSummary:
    """Solve every row not yet in the folder's results (:func:`swe_folder`), ``workers`` instances at a time.

    Each instance that ends gets its trajectory file and a line on the display; when some episode ran to
    its end, also its line in ``predictions.jsonl`` and its row in ``results.jsonl`` (else the next run
    tries it again).
    """
    model_name = folder.fingerprint["model"]
    async with folder:
        predictions = folder.results_file(PREDICTIONS_FILE, key=lambda row: row["instance_id"])

        def row(outcome: ProblemOutcome) -> dict[str, Any] | None:
            instance = solver.outcome(outcome)
            trajectory = {"model_name_or_path": model_name, "settings": folder.settings, **instance.model_dump()}
            write_json_atomically(trajectory_path(folder.path, instance.instance_id), trajectory)
            folder.progress.print(_status_line(instance))
            if not instance.completed:
                return None
            if instance.instance_id not in predictions.done():  # else written before a kill that cost the row
                predictions.append(
                    {
                        "instance_id": instance.instance_id,
                        "model_name_or_path": model_name,
                        "model_patch": instance.model_patch,
                    }
                )
            return {
                "instance_id": instance.instance_id,
                "patch": bool(instance.model_patch.strip()),
                "error": instance.error,
                "ttc": instance.ttc,
                "episodes": len(instance.episodes),
                "hosts": instance.hosts,
                "moved": len(instance.moves),
            }

        problems = [solver.problem(r) for r in rows]
        salt = (json.dumps(folder.fingerprint, sort_keys=True),)  # the model and what an episode does
        return await folder.run(
            solver.explorer, solver.config, problems, row, concurrency=workers, label="instances", salt=salt
        )


def run_counts(summary: RunSummary, folder: RunFolder, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON summary's ``counts`` of a run over ``rows``: done (now or before) and failed, and of the
    finished, how many with a patch."""
    wanted = {row["instance_id"] for row in rows}
    finished = [row for row in folder.results.rows if row["instance_id"] in wanted]
    patches = sum(row["patch"] for row in finished)
    return item_counts(
        summary.total,
        len(summary.failed),
        already_done=summary.skipped,
        finished_now=summary.written,
        patches=patches,
        without_patch=len(finished) - patches,
        ttc=sum(row["ttc"] for row in finished),
    )


def summary_line(counts: dict[str, Any], folder: RunFolder) -> str:
    """The run in one line (``counts`` from :func:`run_counts`): what was skipped, finished and failed, the
    patches and TTC of the finished rows."""
    finished = counts["patches"] + counts["without_patch"]
    return (
        f"{counts['total']} instances: {counts['already_done']} already done, {counts['finished_now']} finished now, "
        f"{counts['failed']} failed (retried on the next run); of the {finished} finished, {counts['patches']} "
        f"with a patch, {counts['without_patch']} without; effective TTC {counts['ttc']} tokens; predictions in "
        f"{folder.path / PREDICTIONS_FILE}"
    )


def _status_line(instance: InstanceOutcome) -> str:
    why = f" ({instance.error})" if instance.error else ""
    if not instance.completed:
        status = f"failed{why}"
    elif instance.model_patch.strip():
        status = f"patch of {instance.model_patch.count(chr(10))} lines"
    elif any(e["stop_reason"] == "error" for e in instance.episodes):
        status = f"no patch{why}"
    else:  # every episode ran to its end without a patch: say how they ended, not the operator's round error
        endings = Counter(e["stop_reason"] for e in instance.episodes)
        status = "no patch (episodes ended: " + ", ".join(f"{n} by {reason}" for reason, n in endings.items()) + ")"
    if instance.moves:
        status += f"; {len(instance.moves)} episode(s) moved to another host"
    noted = sum(bool(e.get("sandbox_notes")) for e in instance.episodes)
    if noted:  # a command stopped at a cap, a file left out of the patch: the trajectory says what
        status += f"; sandbox notes in {noted} episode(s)"
    return f"{instance.instance_id}: {status}"[:300]
