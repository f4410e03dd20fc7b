"""``pacore bench faults [--quick]``: the fault and resume scenarios, a table, then one JSON object.

The last line printed is JSON (the command kit's summary: ``command``, ``exit_code``, ``output``, ``counts``) with
``problems``, ``answered``, ``duplicates``, ``lost`` and ``resumed_ok`` (plus details), so scripts and CI can read
it with ``tail -n 1``.
"""

from __future__ import annotations

import argparse

from pacore_graph.command_kit import add_output_argument, item_counts, print_summary, summarised

COMMAND = "bench faults"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "faults",
        help="reliability: a flaky emulated server (5%% HTTP 500, 2%% drops, 1%% timeouts) and kill-and-resume",
    )
    parser.add_argument("--quick", action="store_true", help="fewer problems (16 and 4), about a minute")
    parser.add_argument("--problems", type=int, help="problems in the fault scenario (default 64; quick 16)")
    add_output_argument(parser, "keep the runs' folders here (default: a temporary folder, removed)")
    parser.set_defaults(func=main)


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio
    import tempfile
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.faults import (
        FaultSettings,
        final_summary,
        run_fault_scenario,
        run_resume_scenario,
    )
    from pacore_graph.extend import RunProgress

    settings = FaultSettings.from_command_line(args.quick, problems=args.problems)
    progress = RunProgress()
    progress.add("scenarios", 2)
    with tempfile.TemporaryDirectory(prefix="pacore-faults-") as scratch, progress:
        root = Path(args.output or scratch)
        progress.advance("scenarios", 0, note=f"faults: {settings.problems} problems, schedule {settings.rounds}")
        faults = asyncio.run(run_fault_scenario(settings, root / "faults"))
        progress.advance("scenarios", note=f"resume: {settings.resume_problems} problems, SIGKILL mid-problem")
        resume = run_resume_scenario(settings, root / "resume")
        progress.advance("scenarios", note="done")

    table = Table(title="pacore bench faults")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_column("ok")
    rows = [
        ("problems answered", f"{faults.answered}/{faults.problems}", faults.answered == faults.problems),
        ("duplicate results", str(faults.duplicates + resume.duplicates), faults.duplicates + resume.duplicates == 0),
        ("lost problems / trajectories", str(faults.lost), faults.lost == 0),
        ("trajectories (failed after retries)", f"{faults.trajectories} ({faults.failed_trajectories})", True),
        ("retries", str(faults.retries), True),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(faults.faults_injected.items())), True),
        ("resume: rows before kill / total", f"{resume.rows_before_kill}/{resume.problems}", True),
        ("resume: saved trajectories of problems in flight", str(resume.saved_in_flight), resume.saved_in_flight > 0),
        (
            "resume: requests after restart (expected)",
            f"{resume.resume_requests} ({resume.expected_resume_requests})",
            resume.resume_requests == resume.expected_resume_requests,
        ),
        ("resume: finished trajectories redone", str(resume.redone), resume.redone == 0),
        ("resume: rows equal clean run (count, ids)", f"{resume.rows}", resume.ids_equal_clean),
        ("resume: torn lines", str(resume.torn_lines), resume.torn_lines == 0),
    ]
    for name, value, ok in rows:
        table.add_row(name, value, "[green]yes[/]" if ok else "[red]NO[/]")
    Console().print(table)
    summary = final_summary(faults, resume)
    wrong = [
        name
        for name, value in (
            ("problems unanswered", summary["problems"] - summary["answered"]),
            ("duplicate results", summary["duplicates"]),
            ("lost", summary["lost"]),
            ("resume not clean", not summary["resumed_ok"]),
        )
        if value
    ]
    counts = item_counts(
        summary["problems"],
        summary["problems"] - summary["answered"],
        lost=summary["lost"],
        duplicates=summary["duplicates"],
    )
    error = f"checks failed: {', '.join(wrong)} (the table above)" if wrong else None
    return print_summary(COMMAND, 1 if wrong else 0, output=args.output, counts=counts, error=error, **summary)
