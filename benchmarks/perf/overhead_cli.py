"""``pacore bench overhead``: the operator's client cost beside a bare aiohttp floor, on the serving emulator."""

from __future__ import annotations

import argparse
from typing import Any

from pacore_graph.command_kit import (
    add_alias,
    add_concurrency_argument,
    add_output_argument,
    add_schedule_arguments,
    print_summary,
    schedules_from_args,
    summarised,
)

COMMAND = "bench overhead"


def _schedules(text: str) -> list[str]:
    """The old ``--schedules '4;16;32,4'`` -> ``['4', '16', '32,4']``, one ``--rounds`` each."""
    parts = [part.strip() for part in text.split(";") if part.strip()]
    if not parts or any(not k.strip().isdigit() or int(k) < 1 for part in parts for k in part.split(",")):
        raise argparse.ArgumentTypeError(f"schedules look like '4;16;32,4', each round at least 1, not {text!r}")
    return parts


def _lengths(text: str) -> int | tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        return (int(low), int(high)) if high else int(low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"output tokens are N or MIN-MAX, not {text!r}") from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "overhead",
        help="operator vs bare aiohttp floor on the serving emulator (wall, CPU, RSS, streaming)",
        description="Runs the PaCoRe schedules [4], [16] and [32, 4] through PaCoReNode in a graph and through a "
        "bare aiohttp client sending the same requests, side by side on the serving emulator, and [16] through the "
        "OpenAI-compatible endpoint against the in-process operator. Every client runs under the same GC setting "
        "(--gc). Prints tables, each target with its figure and whether it was met, and, as the last line, one "
        "JSON object (gc, wall_ratio, cpu_ratio, cpu_ms_per_trajectory, stream_ratio, peak_rss_mb, "
        "proxy_added_cpu_ms_per_trajectory, reference, targets, ...).",
    )
    parser.add_argument("--quick", action="store_true", help="16 problems, ~1 s requests, no scaling (about 1 min)")
    parser.add_argument("--problems", type=int, help="problems per schedule (default 64; quick 16)")
    add_concurrency_argument(
        parser, "requests in flight (client and emulator; default 1024)", default=1024, aliases=["--concurrency"]
    )
    add_schedule_arguments(parser, several=True, default="low,medium,high: [4], [16] and [32, 4]")
    add_alias(parser, "rounds", "--schedules", type=_schedules, action="extend")
    parser.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--stream: every schedule streamed too; default: one streamed probe ([16]); --no-stream: none",
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per client and workload; medians reported")
    parser.add_argument(
        "--scaling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="scaling with K (4..256) and problems (default: on, off with --quick)",
    )
    parser.add_argument(
        "--checkpoint",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="SQLite checkpoint bytes per problem for [32, 4]",
    )
    parser.add_argument(
        "--proxy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the [16] workload through the OpenAI-compatible endpoint vs the in-process operator",
    )
    parser.add_argument(
        "--reference",
        metavar="PATH",
        help="a checkout of stepfun-ai/PaCoRe: its pipeline runs every schedule too, as a third "
        "client in the same rotation (installed once into a scratch venv under ~/.cache)",
    )
    parser.add_argument(
        "--gc",
        choices=["default", "spaced"],
        default="default",
        help="every client's garbage collector: default, CPython's as a process finds it (what a "
        "PaCoReNode user gets; the default), or spaced, full passes rarer while runs are in flight "
        "(PaCoReConfig(spaced_gc=True) for the operator, the same thresholds for the others)",
    )
    parser.add_argument("--profile", action="store_true", help="also profile one operator run with cProfile")
    parser.add_argument("--ttft", type=float, help="emulator seconds to first token")
    parser.add_argument("--token-delay", type=float, help="emulator seconds per token")
    parser.add_argument("--output-tokens", type=_lengths, help="emulator completion length, N or MIN-MAX")
    add_output_argument(parser, "folder for overhead.md/.json/.png (default: runs/overhead)", default="runs/overhead")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Any:
    from pacore_benchmarks.perf.overhead import OverheadSettings

    given = bool(args.rounds or args.preset)
    return OverheadSettings.from_command_line(
        args.quick,
        concurrency=args.max_concurrency,
        stream=args.stream,
        repeats=args.repeats,
        checkpoint=args.checkpoint,
        proxy=args.proxy,
        profile=args.profile,
        output_dir=args.output,
        reference=args.reference,
        gc=args.gc,
        problems=args.problems,
        scaling=args.scaling,
        schedules=schedules_from_args(args, []) if given else None,
        emulator={"ttft": args.ttft, "token_delay": args.token_delay, "output_tokens": args.output_tokens},
    )


@summarised(COMMAND)
def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from pacore_benchmarks.perf.overhead import run_overhead, summarise, write_outputs
    from pacore_benchmarks.perf.overhead_report import rich_tables, target_lines
    from pacore_benchmarks.perf.reference import check_checkout

    console = Console(stderr=True)
    settings = settings_from_args(args)  # bad values: one line, exit status 2
    if settings.reference is not None:
        check_checkout(settings.reference)  # a wrong path fails before any emulator starts
    report = run_overhead(settings, console)  # a worker that fails, or the reference's set-up: exit status 1
    summary = summarise(report)
    markdown = write_outputs(report, summary)
    out = Console()
    if not out.is_terminal:
        out = Console(width=100)  # files and pipes: the tables are made to fit 100 columns
    for table in rich_tables(report):
        out.print(table)
    if report.checkpoint is not None and report.checkpoint.checkpoint:
        c = report.checkpoint.checkpoint
        out.print(
            f"checkpoints ([32, 4], SQLite): {c['file_bytes_per_problem']:,.0f} file bytes per problem, "
            f"{c['payload_bytes_per_problem']:,.0f} payload bytes per problem"
        )
    if summary["proxy_added_cpu_ms_per_trajectory"] is not None:
        out.print(
            f"through the endpoint: {summary['proxy_added_cpu_ms_per_trajectory']:+.3f} ms CPU per trajectory, "
            f"{summary['proxy_wall_ratio']:.3f}x wall, against the in-process operator"
        )
    for line in target_lines(report, summary):
        out.print(line, highlight=False)
    out.print(f"report: {markdown}")
    missed = [name for name, target in summary["targets"].items() if not target["met"]]
    error = f"missed target(s) (--strict): {', '.join(missed)}" if args.strict and missed else None
    counts = {"problems": settings.problems, "schedules": len(settings.schedules), "repeats": settings.repeats}
    return print_summary(COMMAND, 1 if error else 0, output=settings.output_dir, counts=counts, error=error, **summary)
