"""``pacore bench instructions [--quick] [--baseline PATH]``: instructions per trajectory, a table, then one JSON
object (the command kit's summary) with ``per_trajectory`` (side -> client -> instructions), ``spread``,
``operator_over_floor`` and, with a baseline, ``versus_baseline`` (client -> this checkout's figure over the
baseline's)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pacore_graph.command_kit import (
    add_schedule_arguments,
    comma_list,
    print_summary,
    schedule_from_args,
    summarised,
)

if TYPE_CHECKING:
    from pacore_benchmarks.perf.instructions import InstructionSettings

COMMAND = "bench instructions"


def _sizes(text: str) -> tuple[int, int]:
    try:
        small, large = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two problem counts such as 2,16, got {text!r}") from None
    return small, large


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "instructions",
        help="the client's instructions per trajectory under valgrind: a 1%% figure where CPU time wobbles 15%%",
        description=(
            "Counts the user-space instructions of the operator's (and the bare floor client's) runs with valgrind's "
            "cachegrind: a small run is subtracted from a large one and divided by the trajectories between them. "
            "With --baseline, another checkout of pacore-graph runs the same way, alternating, and every figure is "
            "also given as a ratio to its own. Needs valgrind (Debian: apt-get install valgrind)."
        ),
    )
    parser.add_argument("--quick", action="store_true", help="[8, 2] over 1 and 4 problems, once (a few minutes)")
    add_schedule_arguments(parser, default="high; quick: 8,2")
    parser.add_argument(
        "--problems", type=_sizes, metavar="SMALL,LARGE", help="problems of the two runs (default 2,16; quick 1,4)"
    )
    parser.add_argument("--repeats", type=int, help="measurements per client and side; medians (default 3; quick 1)")
    parser.add_argument(
        "--clients", type=comma_list, metavar="NAME[,NAME]", help="operator and/or floor (default: both)"
    )
    parser.add_argument("--max-concurrency", type=int, dest="concurrency", metavar="N", help="requests in flight")
    parser.add_argument("--baseline", metavar="PATH", help="another checkout of pacore-graph to compare with")
    parser.set_defaults(func=main)


def settings_from_args(args: argparse.Namespace) -> InstructionSettings:
    from pacore_benchmarks.perf.instructions import InstructionSettings

    return InstructionSettings.from_command_line(
        args.quick,
        rounds=schedule_from_args(args),
        problems=args.problems,
        repeats=args.repeats,
        clients=args.clients,
        concurrency=args.concurrency,
        baseline=args.baseline,
    )


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.instructions import (
        check_baseline,
        check_valgrind,
        run_instructions,
        runs_needed,
    )
    from pacore_graph.extend import RunProgress

    settings = settings_from_args(args)  # bad values: one line, exit status 2
    if settings.baseline is not None:
        check_baseline(settings.baseline)  # refused before any emulator starts, as is a missing valgrind
    check_valgrind()
    progress = RunProgress()
    progress.add("runs under valgrind", runs_needed(settings))
    with progress:
        report = run_instructions(
            settings, on_run=lambda note, done: progress.advance("runs under valgrind", done, note=note)
        )

    small, large = settings.problems
    table = Table(title=f"pacore bench instructions: {settings.rounds}, {large} problems minus {small}")
    for column in ("side", "client", "instructions per trajectory", "measurements", "spread"):
        table.add_column(column, justify="left" if column in ("side", "client") else "right")
    for figure in report.figures:
        runs = ", ".join(f"{run / 1e6:.3f}M" for run in figure.runs)
        table.add_row(figure.side, figure.client, f"{figure.per_trajectory:,.0f}", runs, f"{100 * figure.spread:.1f}%")
    out = Console()
    if not out.is_terminal:
        out = Console(width=100)  # files and pipes: the table is made to fit 100 columns
    out.print(table)
    ratios = report.ratios()
    for client, ratio in ratios.items():
        out.print(f"{client}: {ratio:.4f}x the baseline's instructions per trajectory ({100 * (ratio - 1):+.1f}%)")
    summary: dict[str, Any] = {
        "rounds": settings.rounds,
        "problems": [small, large],
        "per_trajectory": {
            side: {f.client: round(f.per_trajectory) for f in report.figures if f.side == side}
            for side in dict.fromkeys(f.side for f in report.figures)
        },
        "spread": {f"{f.side}/{f.client}": round(f.spread, 4) for f in report.figures},
        "operator_over_floor": report.operator_over_floor(),
        "versus_baseline": {client: round(ratio, 4) for client, ratio in ratios.items()} or None,
    }
    counts = {"repeats": settings.repeats, "runs": runs_needed(settings)}
    return print_summary(COMMAND, 0, counts=counts, **summary)
