"""``pacore bench escalation [--quick]``: a cheap model that escalates to PaCoRe (``pacore_tool``) against PaCoRe on
every step (``PaCoReMiddleware``), the same tasks on the same stronger model (the serving emulator): a table, then
one JSON object (``strong_tokens_ratio`` and each arm's figures per schedule)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pacore_graph.command_kit import add_schedule_arguments, print_summary, schedules_from_args, summarised

if TYPE_CHECKING:  # imported on first use at run time: `pacore --help` stays quick
    from pacore_benchmarks.perf.escalation import EscalationSettings

COMMAND = "bench escalation"
COLUMNS = ("rounds", "arm", "strong calls", "strong tokens", "client TTC", "cheap calls", "steps", "wall s")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "escalation",
        help="a cheap model escalating to PaCoRe (the tool) against PaCoRe on every step (the middleware)",
        description="The same agent tasks twice on the serving emulator as the stronger model: a scripted cheap model "
        "that calls pacore_tool for the hard questions only, and an agent whose every model step is PaCoRe "
        "(PaCoReMiddleware). Prints each arm's requests and tokens on the stronger model, a table, then one JSON line.",
    )
    parser.add_argument("--quick", action="store_true", help="8 tasks, preset low: under a minute (default 20 tasks)")
    parser.add_argument("--tasks", type=int, help="agent tasks per arm")
    parser.add_argument("--hard-share", type=float, help="share of the tasks the cheap model escalates (default 0.25)")
    parser.add_argument("--lookups", type=int, help="tool steps of each task before its answer (default 2)")
    add_schedule_arguments(parser, several=True, default="low,medium")
    parser.add_argument(
        "--no-tool-reasoning",
        action="store_true",
        help="the emulator makes a forced tool call without reasoning first (a few tokens: a lower bound)",
    )
    parser.add_argument("--seed", type=int, help="emulator seed (default 0)")
    parser.set_defaults(func=main)


def settings_from_args(args: argparse.Namespace) -> EscalationSettings:
    from pacore_benchmarks.perf.escalation import EscalationSettings

    schedules = schedules_from_args(args, []) or None
    return EscalationSettings.from_command_line(
        args.quick,
        tasks=args.tasks,
        hard_share=args.hard_share,
        lookups=args.lookups,
        schedules=schedules,
        emulator={"seed": args.seed, "tool_call_reasoning": False if args.no_tool_reasoning else None},
    )


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.escalation import ArmRun, is_hard, run_benchmark

    settings = settings_from_args(args)  # bad values: one line from the pacore command's error handling
    console = Console(stderr=True)

    def task_done(arm: str, done: int, total: int) -> None:
        console.print(f"  {arm}: {done}/{total} tasks")

    def arm_done(run: ArmRun) -> None:
        console.print(
            f"{run.arm} {run.schedule}: {run.strong_requests} strong requests, {run.strong_tokens:,} strong tokens, "
            f"{run.wall_s} s"
        )

    hard = sum(is_hard(index, settings.hard_share) for index in range(settings.tasks))
    console.print(
        f"{settings.tasks} tasks ({hard} hard), {settings.lookups} lookups each, schedules {settings.schedules}, "
        f"tool calls {'after reasoning' if settings.emulator.tool_call_reasoning else 'without reasoning'}"
    )
    report = asyncio.run(run_benchmark(settings, on_run=arm_done, on_task=task_done))

    table = Table(title="pacore bench escalation")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("rounds", "arm") else "right")
    for run in report.runs:
        table.add_row(
            str(run.schedule),
            run.arm,
            str(run.strong_requests),
            f"{run.strong_tokens:,}",
            f"{run.strong_ttc:,}",
            str(run.cheap_calls),
            str(run.model_steps),
            f"{run.wall_s:.1f}",
        )
    Console().print(table)
    counts = {"tasks": settings.tasks, "schedules": len(settings.schedules), "arms": 2}
    return print_summary(COMMAND, counts=counts, **report.summary())
