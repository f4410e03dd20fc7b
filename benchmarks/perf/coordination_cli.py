"""``pacore bench coordination [--quick]``: paper pipeline, budget, early stop, subset, dedup and vote on the
serving emulator, a table, then one JSON object (``tokens_saved_early_stop``, ``agreement_kept_early_stop``,
and every method's figures)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pacore_graph.command_kit import (
    add_alias,
    add_schedule_arguments,
    comma_list,
    print_summary,
    schedule_from_args,
    summarised,
)

if TYPE_CHECKING:  # imported on first use at run time: `pacore --help` stays quick
    from pacore_benchmarks.perf.coordination import CoordinationSettings

COMMAND = "bench coordination"
TARGETS = {"tokens_saved_early_stop": 0.30, "agreement_kept_early_stop": 0.95}
LAG_WARNING_S = 0.1
COLUMNS = ("method", "completion tokens", "saved", "prompt tokens", "wall s", "agreement", "kept", "cancelled", "stops")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "coordination",
        help="coordination options side by side on the serving emulator: tokens, wall, majority agreement",
    )
    parser.add_argument("--quick", action="store_true", help="100 problems, about 3 minutes (default 200)")
    parser.add_argument("--problems", type=int, help="problems (every method runs all of them)")
    add_schedule_arguments(parser, default="high: [32, 4]")
    add_alias(parser, "rounds", "--schedule")
    parser.add_argument("--methods", help="comma-separated, from paper,budget,early_stop,...")
    parser.add_argument("--mix", metavar="KIND=WEIGHT,...", help="share of easy, split and hard problems")
    parser.add_argument("--lead", type=int, help="early stop: a lead over the runner-up that ends a round (default 4)")
    parser.add_argument("--subset", type=int, help="references per trajectory in the subset method (default 8)")
    parser.add_argument("--seed", type=int, help="emulator seed (default 0)")
    parser.add_argument(
        "--token-delay",
        type=float,
        help="emulator seconds per token (default 0.001; slower on a busy machine keeps cuts timely)",
    )
    parser.add_argument("--output-tokens", help="emulator completion length, MIN-MAX (default 400-4000)")
    parser.set_defaults(func=main)


def settings_from_args(args: argparse.Namespace) -> CoordinationSettings:
    from pacore_benchmarks.perf.coordination import CoordinationSettings
    from pacore_emulator.config import AnswerMix

    methods = comma_list(args.methods) if args.methods else None
    output_tokens = None
    if args.output_tokens:
        low, _, high = args.output_tokens.partition("-")
        try:
            output_tokens = (int(low), int(high or low))
        except ValueError:
            raise ValueError(f"--output-tokens is MIN-MAX, such as 400-4000, not {args.output_tokens!r}") from None
    answers = {"weights": AnswerMix.parse_weights(args.mix)} if args.mix else None
    return CoordinationSettings.from_command_line(
        args.quick,
        problems=args.problems,
        lead=args.lead,
        subset=args.subset,
        schedule=schedule_from_args(args),
        methods=methods,
        emulator={
            "seed": args.seed,
            "token_delay": args.token_delay,
            "output_tokens": output_tokens,
            "answers": answers,
        },
    )


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.coordination import MethodRun, run_benchmark

    settings = settings_from_args(args)  # bad values: one line from the pacore command's error handling
    console = Console(stderr=True)

    def progress(run: MethodRun) -> None:
        console.print(f"{run.method}: {run.completion_tokens} tokens, {run.wall_s} s, agreement {run.agreement:.3f}")

    mix = settings.emulator.answers.weights
    console.print(f"{settings.problems} problems, schedule {settings.schedule}, mix {mix}")
    report = asyncio.run(run_benchmark(settings, on_run=progress))

    table = Table(title="pacore bench coordination")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("method", "stops") else "right")
    for run in report.runs:
        stops = ", ".join(f"{reason} {count}" for reason, count in run.stops.items())
        table.add_row(
            run.method,
            str(run.completion_tokens),
            f"{report.saved(run.method):.1%}",
            str(run.prompt_tokens),
            f"{run.wall_s:.1f}",
            f"{run.agreement:.1%}",
            f"{report.kept(run.method):.1%}",
            str(run.cancelled),
            stops,
        )
    Console().print(table)
    lagging = [run.method for run in report.runs if run.lag_p99_s > LAG_WARNING_S]
    if lagging:
        console.print(
            f"[yellow]the client lagged behind the emulator's clock in {', '.join(lagging)} (a busy "
            "machine?): cuts came late, so early stop and budgets look worse than they are"
        )
    summary = report.summary()
    missed = [f"{name} {summary[name]} < {TARGETS[name]}" for name in missed_targets(summary)]
    error = f"missed target(s): {', '.join(missed)}" if missed else None
    counts = {"problems": settings.problems, "methods": len(report.runs)}
    return print_summary(COMMAND, 1 if missed else 0, counts=counts, error=error, **summary)


def missed_targets(summary: dict[str, Any]) -> list[str]:
    """The targets (:data:`TARGETS`) the run fell short of; none when early stop did not run."""
    if "tokens_saved_early_stop" not in summary:
        return []
    return [name for name, target in TARGETS.items() if summary[name] < target]
