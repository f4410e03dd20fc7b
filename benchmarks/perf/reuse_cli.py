"""``pacore bench reuse [--quick]``: ``earlier`` then ``later`` (each problem continuing from its earlier result)
against ``later`` alone on the serving emulator: a table, then one JSON object (``escalation_over_target`` and each
part's figures)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pacore_graph.command_kit import print_summary, summarised
from pacore_graph.extend import PRESETS, parse_rounds

if TYPE_CHECKING:  # imported on first use at run time: `pacore --help` stays quick
    from pacore_benchmarks.perf.reuse import ReuseSettings

COMMAND = "bench reuse"
COLUMNS = ("arm", "part", "rounds", "requests", "reused", "completion tokens", "prompt tokens", "wall s")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reuse",
        help="escalating low -> medium, reusing what low bought, against medium alone (tokens, wall)",
        description="The same problems on the serving emulator: the later schedule alone, and the earlier schedule "
        "then the later one continuing from it (asolve(..., reuse=earlier)). Prints each part's requests, tokens "
        "and wall time, a table, then one JSON line; the target is escalation <= later alone + the earlier syntheses.",
    )
    parser.add_argument("--quick", action="store_true", help="8 problems: under a minute (default 20)")
    parser.add_argument("--problems", type=int, help="problems (both arms run all of them)")
    parser.add_argument("--earlier", type=schedule, help="preset name or rounds first run (default low: 4)")
    parser.add_argument("--later", type=schedule, help="preset name or rounds escalated to (default medium: 16)")
    parser.add_argument("--concurrency", type=int, help="problems in flight (default 8)")
    parser.add_argument("--seed", type=int, help="emulator seed (default 0)")
    parser.add_argument("--token-delay", type=float, help="emulator seconds per token (default 0.0005)")
    parser.set_defaults(func=main)


def schedule(text: str) -> list[int]:
    """A preset name (low, medium, high) or comma-separated rounds."""
    return list(PRESETS[text]) if text in PRESETS else parse_rounds(text)


def settings_from_args(args: argparse.Namespace) -> ReuseSettings:
    from pacore_benchmarks.perf.reuse import ReuseSettings
    from pacore_graph.coordination import check_escalation

    settings = ReuseSettings.from_command_line(
        args.quick,
        problems=args.problems,
        earlier=args.earlier,
        later=args.later,
        concurrency=args.concurrency,
        emulator={"seed": args.seed, "token_delay": args.token_delay},
    )
    check_escalation(settings.earlier, settings.later, "the --earlier run")
    return settings


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.reuse import Part, run_benchmark

    settings = settings_from_args(args)  # bad values: one line from the pacore command's error handling
    console = Console(stderr=True)
    console.print(
        f"{settings.problems} problems, {settings.concurrency} at a time: rounds {settings.later} alone, then "
        f"{settings.earlier} and {settings.later} continuing from it"
    )

    def part_done(name: str, part: Part) -> None:
        console.print(
            f"{name} {part.rounds}: {part.requests} requests, {part.reused} reused, "
            f"{part.completion_tokens:,} completion tokens, {part.wall_s} s"
        )

    report = asyncio.run(run_benchmark(settings, on_part=part_done))
    table = Table(title="pacore bench reuse")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("arm", "part", "rounds") else "right")
    rows = [
        ("later alone", "", report.later_alone),
        ("escalation", "earlier", report.earlier),
        ("escalation", "continued", report.continued),
    ]
    for arm, part_name, part in rows:
        table.add_row(
            arm,
            part_name,
            str(part.rounds),
            str(part.requests),
            str(part.reused),
            f"{part.completion_tokens:,}",
            f"{part.prompt_tokens:,}",
            f"{part.wall_s:.1f}",
        )
    escalation_wall = report.earlier.wall_s + report.continued.wall_s
    table.add_row(
        "escalation",
        "total",
        "",
        str(report.earlier.requests + report.continued.requests),
        str(report.continued.reused),
        f"{report.escalation_tokens:,}",
        f"{report.earlier.prompt_tokens + report.continued.prompt_tokens:,}",
        f"{escalation_wall:.1f}",
    )
    Console().print(table)
    summary = report.summary()
    console.print(
        f"escalation {report.escalation_tokens:,} tokens against the target {report.target_tokens:,} (later alone "
        f"+ the earlier syntheses): {summary['escalation_over_target']}x; without reuse "
        f"{report.paying_twice_tokens:,} ({summary['escalation_over_paying_twice']}x of it spent with reuse)"
    )
    counts = {"problems": settings.problems, "arms": 2}
    code = print_summary(COMMAND, counts=counts, **summary)
    return code
