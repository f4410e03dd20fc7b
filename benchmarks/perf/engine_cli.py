"""``pacore bench engine [--quick] [--base-url URL]``: the engine's side of performance, on real vLLM.

One PaCoRe schedule through the operator, through a bare client sending the same requests, and as ``n=K`` sampling
(:mod:`~pacore_benchmarks.perf.engine`); vLLM's own counters say what each cost it. Tables on stderr; the last
stdout line is one JSON object: ``throughput_ratio_operator_vs_bare`` (target at least 0.95),
``prefill_ratio_round2plus_operator_vs_n_k`` (at most 1), ``cached_fraction_round2plus`` beside
``cached_fraction_target`` ((K-1)/K) and ``cached_over_block_bound_round2plus``, ``targets`` (each met or not) and
``sides`` (each side's figures, per round too). Ratios are reported, not enforced, unless ``--strict``.
"""

from __future__ import annotations

import argparse
from typing import Any

from pacore_graph.command_kit import add_output_argument, print_summary, say, summarised
from pacore_graph.extend import parse_rounds

COMMAND = "bench engine"


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "engine",
        help="PaCoRe on real vLLM: operator vs a bare client vs n=K sampling (prefix cache, throughput)",
        description="Runs one PaCoRe schedule through the operator, through a bare aiohttp client sending exactly "
        "the requests the operator sent, and as n=K sampling (one request per round), against vLLM; reads vLLM's "
        "/metrics before every round: prompt tokens computed and served from the prefix cache, tokens generated. "
        "Without --base-url it starts vLLM's CPU build with `pacore serve-vllm` and stops it at the end.",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="an already-running vLLM (.../v1); its first model serves "
        "unless --model names one (default: start one with pacore serve-vllm)",
    )
    parser.add_argument("--model", help="model name on --base-url (default: the server's first)")
    parser.add_argument(
        "--model-dir",
        help="model folder to serve when starting vLLM (default: the SmolLM2-135M that scripts/vllm-setup.sh prepares)",
    )
    parser.add_argument(
        "--rounds",
        type=parse_rounds,
        metavar="K1[,K2...]",
        help="PaCoRe schedule (default 4,4: then a final round of 1)",
    )
    parser.add_argument("--max-tokens", type=int, metavar="N", help="cap on each reply (default 48; quick 32)")
    parser.add_argument("--problems", type=int, help="problems per run, one after another (default 3; quick 1)")
    parser.add_argument("--repeats", type=int, help="runs per side, medians reported (default 3; quick 1)")
    parser.add_argument("--block-size", type=int, help="KV block size of a vLLM started here (default 32)")
    parser.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every reply exactly --max-tokens long, so every side generates the same tokens (default: on)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="one problem, one run per side: about a minute on a running server"
    )
    add_output_argument(parser, "folder for the started vLLM's log (default: a temporary folder)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.set_defaults(func=main)


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio
    import subprocess
    from contextlib import nullcontext
    from pathlib import Path

    from rich.console import Console

    from pacore_benchmarks.perf.engine import EngineSettings, SideRun, run_benchmark, summarise
    from pacore_benchmarks.perf.engine_server import started_vllm

    settings = EngineSettings.from_command_line(
        args.quick,
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        problems=args.problems,
        repeats=args.repeats,
        block_size=args.block_size,
        ignore_eos=args.ignore_eos,
    )
    if not settings.rounds or any(k < 1 for k in settings.rounds):
        raise ValueError("--rounds: at least one round before the final one, each of at least 1 trajectory")
    console = Console(stderr=True, width=100)

    def progress(run: SideRun) -> None:
        cached = sum(r.hits for r in run.rounds if r.round >= 2) / max(
            1, sum(r.prompt for r in run.rounds if r.round >= 2)
        )
        console.print(
            f"repeat {run.repeat + 1}/{settings.repeats}, {run.side}: {run.wall_s:.1f} s, "
            f"{run.total('generated')} tokens generated ({run.tokens_per_s:.1f}/s), "
            f"{run.total('prompt')} prompt tokens, {cached:.0%} of round 2+ cached"
        )

    if args.base_url:
        server: Any = nullcontext(args.base_url)
    else:
        model_dir = args.model_dir or _prepared_model(Path(__file__).resolve().parents[2], subprocess)
        console.print(f"starting vLLM: pacore serve-vllm {model_dir} --block-size {settings.block_size} ...")
        server = started_vllm(model_dir, settings.block_size, args.output)
    schedule = f"{settings.rounds} + final 1"
    console.print(
        f"PaCoRe {schedule}, {settings.problems} problem(s) one after another, max_tokens "
        f"{settings.max_tokens}, {settings.repeats} repeat(s): operator, bare client, n=K"
    )
    with server as base_url:
        report = asyncio.run(run_benchmark(settings, base_url, args.model, on_run=progress))
    summary = summarise(report)
    for table in tables(summary):
        Console(stderr=True, width=100).print(table)
    for line in target_lines(summary):
        console.print(line)
    missed = [name for name, met in summary["targets"].items() if not met]
    error = f"missed target(s) (--strict): {', '.join(missed)}" if args.strict and missed else None
    counts = {"problems": settings.problems, "repeats": settings.repeats, "runs": len(report.runs)}
    return print_summary(COMMAND, 1 if error else 0, output=args.output, counts=counts, error=error, **summary)


def _prepared_model(root: Any, subprocess: Any) -> str:
    """The model folder scripts/vllm-setup.sh prints last (it installs and converts only the first time)."""
    script = root / "scripts" / "vllm-setup.sh"
    if not script.exists():
        raise ValueError("no --model-dir given and no scripts/vllm-setup.sh here to prepare one")
    say("preparing vLLM's CPU build and SmolLM2-135M (scripts/vllm-setup.sh; the first time takes minutes)")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"scripts/vllm-setup.sh failed ({done.returncode}): {tail}")
    return str(lines[-1])


def tables(summary: dict[str, Any]) -> list[Any]:
    """Each side's medians, then each round's token accounting (sums over the runs), both within 100 columns."""
    from rich.table import Table

    sides = summary["sides"]
    runs = Table(
        title=f"PaCoRe {summary['rounds']} + 1 on vLLM {summary['vllm_version']}, max_tokens "
        f"{summary['max_tokens']}, block {summary['block_size']}: medians of {summary['repeats']}"
    )
    for column in ("side", "wall s", "tokens/s", "generated", "prompt", "computed", "cached", "req/problem"):
        runs.add_column(column, justify="left" if column == "side" else "right")
    for side, f in sides.items():
        runs.add_row(
            side,
            f"{f['wall_s']:.2f}",
            f"{f['generated_tokens_per_s']:.1f}",
            str(f["generated_tokens"]),
            str(f["prompt_tokens"]),
            str(f["computed_tokens"]),
            str(f["cached_tokens"]),
            f"{f['requests_per_problem']:g}",
        )
    rounds = Table(title="per round, summed over runs and problems: prompt tokens vLLM computed and cached")
    for column in ("round", "K", "side", "prompt", "computed", "cached", "cached %", "bound %", "requests"):
        rounds.add_column(column, justify="left" if column == "side" else "right")
    count = len(next(iter(sides.values()))["rounds"])
    for index in range(count):
        for side, f in sides.items():
            r = f["rounds"][index]
            final = " (final)" if index == count - 1 else ""
            bound = r["cache_bound"] / r["prompt"] if r["prompt"] else 0.0
            rounds.add_row(
                f"{r['round']}{final}",
                str(r["k"]),
                side,
                str(r["prompt"]),
                str(r["computed"]),
                str(r["cached"]),
                f"{(r['cached_fraction'] or 0):.1%}",
                f"{bound:.1%}",
                str(r["requests"]),
                end_section=side == list(sides)[-1],
            )
    return [runs, rounds]


def target_lines(summary: dict[str, Any]) -> list[str]:
    """Each ratio with its target and on which side of it it is."""

    def verdict(met: bool) -> str:
        return "[green]met[/green]" if met else "[red]missed[/red]"

    t = summary["targets"]
    block = summary["block_size"]
    return [
        f"throughput, operator / bare client: {summary['throughput_ratio_operator_vs_bare']} "
        f"(target >= {summary['throughput_target']}: {verdict(t['throughput_within_5_percent'])})",
        f"prefill from round 2, operator / n=K: {summary['prefill_ratio_round2plus_operator_vs_n_k']} "
        f"(target <= 1: {verdict(t['prefill_no_more_than_n_k'])}); bare client / n=K: "
        f"{summary['prefill_ratio_round2plus_bare_vs_n_k']}",
        f"cached share of the K-trajectory rounds from round 2: {summary['cached_fraction_round2plus']} "
        f"(target (K-1)/K = {summary['cached_fraction_target']}: {verdict(t['cached_at_least_k_minus_1_over_k'])}); "
        f"the most a cache of {block}-token blocks can hold is {summary['cache_bound_fraction_round2plus']}, "
        f"and vLLM cached {summary['cached_over_cache_bound_round2plus']} of that",
        f"requests per problem (vLLM's count): {summary['sides']['operator']['requests_per_problem']:g} "
        f"(sum(K) + 1 = {summary['requests_per_problem_expected']}: {verdict(t['requests_per_problem'])}); "
        f"each round's K prompts byte-identical: {verdict(t['identical_prompts'])}",
    ]
