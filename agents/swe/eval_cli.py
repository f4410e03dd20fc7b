"""``pacore swe eval``: grade predictions offline on local images, or through swebench's own harness."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pacore_agents.swe.run_cli import add_instances_argument, add_runtime_arguments
from pacore_graph.command_kit import add_output_argument, item_counts, print_summary, say, summarised

if TYPE_CHECKING:
    from pacore_agents.swe.evaluation import EvalSummary

COMMAND = "swe eval"


def register_eval(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="grade predictions (swebench's graders; offline on local images, or swebench's harness)",
        description=(
            "Grade predictions.jsonl (or the rows' gold patches) with swebench's log parsers and report "
            "functions. --harness offline (default) runs each instance in a fresh container from an image "
            "this Docker host has (local tasks build theirs). --harness swebench hands the run to "
            "swebench.harness.run_evaluation, which pulls the real SWE-bench images: use it on a Docker host "
            "with internet, e.g. `pacore swe eval --dataset SWE-bench/SWE-bench_Verified --predictions "
            "out/predictions.jsonl --run-id my-run --harness swebench`."
        ),
    )
    parser.add_argument(
        "--dataset", required=True, help="a .parquet/.jsonl/.json file, a folder of tasks, a hub name, or 'local'"
    )
    parser.add_argument(
        "--predictions",
        required=True,
        help="predictions .jsonl/.json; 'gold' (the rows' patches); 'no-patch' (tests on the "
        "unchanged repository: FAIL_TO_PASS should fail)",
    )
    parser.add_argument("--run-id", required=True, help="names the log folder OUTPUT/RUN_ID")
    add_output_argument(
        parser,
        "log and report folder (one evaluation at a time: a second one into it is refused; "
        "default: logs/run_evaluation)",
        default="logs/run_evaluation",
    )
    add_instances_argument(parser, "only these instances")
    parser.add_argument("--harness", choices=["offline", "swebench"], default="offline")
    add_runtime_arguments(
        parser,
        "with --harness offline: docker (a container per instance on this Docker host, default) or swerex (on the "
        "sandbox hosts of --hosts FILE, through SWE-ReX; the same grades)",
        choices=["docker", "swerex"],
    )
    parser.add_argument("--workers", type=int, default=2, help="instances graded in parallel")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for one instance's tests")
    parser.add_argument("--memory", default="4g", help="memory limit of an evaluation container")
    parser.add_argument("--split", default="test", help="split of a hub dataset")
    parser.set_defaults(func=run_eval)


@summarised(COMMAND)
def run_eval(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pacore_agents.swe.evaluation import NO_PATCH, evaluate, load_predictions, run_swebench_harness
    from pacore_agents.swe.output_paths import inside
    from pacore_agents.swe.owners import sweep_orphans
    from pacore_agents.swe.run_cli import open_hosts
    from pacore_agents.swe.tasks import load_tasks, parse_instances
    from pacore_graph.extend import FolderLock, UsageError

    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output} is a file, not a folder")
    every_row = load_tasks(args.dataset, split=args.split)
    wanted = parse_instances(args.instances)
    rows = load_tasks(args.dataset, instances=wanted, split=args.split) if wanted else every_row
    predictions = load_predictions(args.predictions, rows if args.predictions in ("gold", NO_PATCH) else every_row)
    output.mkdir(parents=True, exist_ok=True)
    # One evaluation at a time into a folder, locked before anything is spent (images, containers): a
    # second one is refused in one line, as a second `swe run` into a run's folder is.
    with FolderLock(output):
        if args.harness == "swebench":
            if args.runtime != "docker":
                raise UsageError(
                    "--runtime swerex grades with --harness offline (swebench's harness runs its own Docker)"
                )
            chosen = [row for row in rows if row["instance_id"] in predictions]
            report = run_swebench_harness(
                args.dataset,
                chosen,
                args.predictions,
                run_id=args.run_id,
                output_dir=output,
                workers=args.workers,
                timeout=args.timeout,
            )
            say(f"swebench report: {report}")
            made = json.loads(Path(report).read_text())
            counts = item_counts(
                made.get("submitted_instances", len(chosen)),
                made.get("error_instances", 0),
                resolved=made.get("resolved_instances"),
            )
            return print_summary(COMMAND, output=output, counts=counts, report=str(report))
        pool = open_hosts(args, rows, caps={"memory": args.memory, "pids": 1024})
        if pool is None:
            sweep_orphans(log=say)
        try:
            summary = evaluate(
                rows,
                predictions,
                run_id=args.run_id,
                output_dir=output,
                timeout=args.timeout,
                workers=args.workers,
                memory=args.memory,
                skip_patch=args.predictions == NO_PATCH,
                open_sandbox=pool.open if pool is not None else None,
            )
        finally:
            if pool is not None:
                pool.close()
    summary_file = inside(output, args.run_id) / "summary.json"
    say(
        f"run {summary.run_id}: {summary.resolved_instances}/{summary.submitted_instances} resolved "
        f"(dataset {summary.total_instances}, completed {summary.completed_instances}, empty patches "
        f"{summary.empty_patch_instances}, errors {summary.error_instances}); {_reuse(summary)}; summary: "
        f"{summary_file}"
    )
    for instance_id, reason in summary.errors.items():
        say(f"{instance_id}: {reason}"[:2000])
    counts = item_counts(
        summary.submitted_instances,
        summary.error_instances,
        dataset=summary.total_instances,
        completed=summary.completed_instances,
        resolved=summary.resolved_instances,
        unresolved=summary.unresolved_instances,
        empty_patch=summary.empty_patch_instances,
    )
    ids = summary.model_dump(
        include={"resolved_ids", "unresolved_ids", "error_ids", "empty_patch_ids", "reused_ids", "regraded_ids"}
    )
    error = f"{summary.error_instances} instance(s) could not be graded (above)" if summary.error_instances else None
    return print_summary(
        COMMAND, 1 if summary.error_instances else 0, output=summary_file.parent, counts=counts, error=error, **ids
    )


def _reuse(summary: EvalSummary) -> str:
    """Which results come from stored reports, and which stored reports were graded again."""
    reused, regraded = len(summary.reused_ids), len(summary.regraded_ids)
    graded = summary.completed_instances + summary.error_instances - reused
    text = f"graded now {graded}, stored reports reused {reused} (same patch, test spec and harness)"
    if regraded:
        text += f", of them {regraded} graded again over a stored report of another patch, test spec or harness"
    return text
