"""``pacore bench panel [--quick]``: a panel's cost per model (a small and a strong emulated server) against each
model alone, the same problems and schedule: a table, then one JSON object (``panel_vs_strong`` and each arm's
figures per model)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pacore_graph.command_kit import add_schedule_arguments, print_summary, schedule_from_args, summarised

if TYPE_CHECKING:  # imported on first use at run time: `pacore --help` stays quick
    from pacore_benchmarks.perf.panel import PanelSettings

COMMAND = "bench panel"
COLUMNS = ("arm", "model", "requests", "completion tokens", "trajectories", "model s", "arm wall s")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "panel",
        help="a panel of a small and a strong model against each alone: tokens, requests and wall per model",
        description="The same problems three times on two emulated servers (a fast small model, a slower strong "
        "one): every slot on the strong model, a panel (small:strong by weight, the strong model synthesising), "
        "every slot on the small model. Prints each model's requests and tokens (its server's count), a table, then "
        "one JSON line.",
    )
    parser.add_argument("--quick", action="store_true", help="4 problems at [8]: seconds (default 8 problems)")
    parser.add_argument("--problems", type=int, help="problems per arm")
    add_schedule_arguments(parser, default="[16]")
    parser.add_argument("--small-weight", type=float, help="the panel's weight of the small model (strong: 1; 3)")
    parser.set_defaults(func=main)


def settings_from_args(args: argparse.Namespace) -> PanelSettings:
    from pacore_benchmarks.perf.panel import PanelSettings

    return PanelSettings.from_command_line(
        args.quick, problems=args.problems, rounds=schedule_from_args(args) or None, small_weight=args.small_weight
    )


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.panel import ArmRun, run_benchmark

    settings = settings_from_args(args)  # bad values: one line from the pacore command's error handling
    console = Console(stderr=True)

    def arm_done(run: ArmRun) -> None:
        console.print(f"{run.arm}: {run.requests} requests, {run.tokens:,} completion tokens, {run.wall_s} s")

    console.print(
        f"{settings.problems} problems at {settings.rounds}, panel small:strong = {settings.small_weight:g}:1, "
        f"{settings.concurrency} in flight"
    )
    report = asyncio.run(run_benchmark(settings, on_run=arm_done))
    table = Table(title="pacore bench panel")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("arm", "model") else "right")
    for run in report.runs:
        for name, cost in run.models.items():
            table.add_row(
                run.arm,
                name,
                str(cost.requests),
                f"{cost.completion_tokens:,}",
                str(cost.trajectories),
                f"{cost.seconds:.1f}",
                f"{run.wall_s:.1f}",
            )
    Console().print(table)
    counts = {"problems": settings.problems, "arms": len(report.runs)}
    return print_summary(COMMAND, counts=counts, **report.summary())
