"""``pacore bench math``: the scaling curve; ``grade``: grade a predictions file; ``export-train``: PaCoRe
training data from the model's own pool (docs/training-data.md).

pacore bench math [--data PATH] [--limit N] [--base-url URL] [--model M] [--methods single,vote,pacore,...]
                  [--preset low,medium,high | --rounds 32,4 ...] [--samples N] [--pool N] [--output DIR]
pacore bench math grade [--data PATH] --predictions FILE [--verdicts FILE]
pacore bench math export-train [--data PATH] [--pool N | --pool-file FILE] [--base-url URL]
                  [--min-message-accuracy 0 --max-message-accuracy 0.375]
                  [--synthesis-samples N --min-synthesis-accuracy 0 --max-synthesis-accuracy 1] [--output DIR]

--data also reads PaCoRe-Train rows ({"conversation": [...], "ground_truth": ...}, JSON lines or one JSON
list): the conversation is asked as it is and graded against the ground truth.

A predictions file is JSON lines (or one JSON list) of {"id": ..., "response": ...}: the id of a problem in
--data and the model's whole response (reasoning before </think> is ignored; a null response counts as
wrong). Several rows may share an id (samples). Grading follows MathArena's rules (see grading.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pacore_benchmarks.hub import DefaultData
from pacore_graph.command_kit import comma_list, item_counts, print_summary, say, summarised

DEFAULT_DATA = DefaultData(Path("../shared/data/math/aime_2025.jsonl"), "MathArena/aime_2025")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pacore_graph.command_kit import add_run_arguments  # noqa: PLC0415
    from pacore_graph.extend import EMBEDDED_MAX_TOKENS  # noqa: PLC0415

    parser = subparsers.add_parser(
        "math",
        help="math (AIME/HMMT): accuracy vs effective TTC for single, majority vote and PaCoRe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=["run", "grade", "export-train"],
        default="run",
        help="run the benchmark (default), grade a predictions file, or export PaCoRe training data",
    )
    parser.add_argument(
        "--data",
        metavar="PATH",
        help=DEFAULT_DATA.help(f"a .jsonl of id/problem/answer rows or a hub name such as {DEFAULT_DATA.hub_name}"),
    )
    parser.add_argument("--limit", type=int, help="first N problems only")
    add_run_arguments(
        parser,
        several_schedules=True,
        schedule_default="all three; embedded model: low",
        concurrency="model calls in flight at most over the whole run (default 256)",
        concurrency_default=256,
        concurrency_aliases=["--max-inflight"],
        max_tokens=f"cap per generated message (default: none; on the embedded model {EMBEDDED_MAX_TOKENS})",
        output="results folder (resumable; default: runs/math-<data name>; export-train: runs/train-<data name>)",
    )
    parser.add_argument(
        "--methods",
        default="single,vote,pacore",
        help="comma list of single, vote, pacore, and PaCoRe with a coordination option: pacore+early_stop, "
        "pacore+budget (with --budget-tokens), pacore+subset, pacore+dedup, pacore+vote, pacore+verifier",
    )
    parser.add_argument("--budget-tokens", type=int, help="pacore+budget: completion tokens per problem")
    parser.add_argument("--vote-k", help="comma list of vote sizes (default: the first round of each schedule)")
    parser.add_argument("--samples", type=int, default=1, help="samples per problem; pass@1 is their mean")
    parser.add_argument(
        "--pool",
        type=int,
        help="pooled first-round trajectories per problem (default: the largest first round / vote size; "
        "export-train: the pool file as it is)",
    )
    parser.add_argument(
        "--pool-file",
        help="pool JSONL to create or reuse across runs (default: OUTPUT/pool.jsonl); export-train reads a math run's",
    )
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--context-window", type=int, help="model context in tokens (references are capped to fit)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of pool draws and reference shuffles (sample s shuffles with Random(42 + SEED*1000003 + s): "
        "the reference pipeline's 42 by default)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--predictions", help="grade: JSONL (or JSON list) of {id, response} rows")
    parser.add_argument(
        "--verdicts", help="grade: where to write one verdict per row (default: PREDICTIONS with .verdicts.jsonl)"
    )
    export = parser.add_argument_group(
        "export-train", "PaCoRe training data (docs/training-data.md); each filter keeps min < accuracy < max"
    )
    export.add_argument(
        "--min-message-accuracy",
        type=float,
        metavar="A",
        help="stage 1: lower bound on the share of pooled responses graded correct (paper, math: 0)",
    )
    export.add_argument(
        "--max-message-accuracy", type=float, metavar="A", help="stage 1: upper bound (paper, math: 0.375 = 9/24)"
    )
    export.add_argument(
        "--synthesis-samples",
        type=int,
        default=0,
        metavar="N",
        help="stage 2: synthesis runs per stage-1 problem, each over a seeded draw of |M| ~ U(16, 24) pooled "
        "responses (capped by the pool); 0: no stage 2",
    )
    export.add_argument("--min-synthesis-accuracy", type=float, metavar="A", help="stage 2: lower bound (paper: 0)")
    export.add_argument("--max-synthesis-accuracy", type=float, metavar="A", help="stage 2: upper bound (paper: 1)")
    parser.set_defaults(func=main)


def _data_source(args: argparse.Namespace) -> str:
    return DEFAULT_DATA.source(args.data)


def _load(args: argparse.Namespace) -> list[Any]:
    """The problems; without --data and without the shared copy, the hub, and an error that says what to pass."""
    from pacore_benchmarks.math.data import load_problems  # noqa: PLC0415

    return DEFAULT_DATA.read(args.data, lambda source: load_problems(source, args.limit))


def main(args: argparse.Namespace) -> int:
    if args.action == "grade":
        return grade_command(args)
    if args.action == "export-train":
        from pacore_benchmarks.math.export_cli import export_command  # noqa: PLC0415

        return export_command(args)
    return run_command(args)


# -- grade -------------------------------------------------------------------------------------------------
@summarised("bench math grade")
def grade_command(args: argparse.Namespace) -> int:
    from pacore_benchmarks.math.data import DataError  # noqa: PLC0415
    from pacore_benchmarks.math.predictions import grade_predictions, read_predictions  # noqa: PLC0415

    if not args.predictions:
        raise DataError('grade needs --predictions FILE (JSON lines of {"id": ..., "response": ...})')
    predictions_path = Path(args.predictions)
    predictions = read_predictions(predictions_path)
    problems = _load(args)
    known = {p.id for p in problems}
    unknown = sorted({p["id"] for p in predictions} - known)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise DataError(
            f"{len(unknown)} prediction id(s) are not in {_data_source(args)}: {shown} "
            f"(its ids look like {problems[0].id!r}; pass the matching --data)"
        )
    verdicts = grade_predictions(problems, predictions)
    verdicts_path = Path(args.verdicts) if args.verdicts else predictions_path.with_suffix(".verdicts.jsonl")
    verdicts_path.parent.mkdir(parents=True, exist_ok=True)
    verdicts_path.write_text("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in verdicts))
    correct = sum(v["correct"] for v in verdicts)
    flags: dict[str, int] = {}
    for verdict in verdicts:
        if verdict["flag"]:
            flags[verdict["flag"]] = flags.get(verdict["flag"], 0) + 1
    answered = {v["id"] for v in verdicts}
    missing = len(known - answered)
    flagged = ", ".join(f"{count} {flag}" for flag, count in sorted(flags.items())) or "none"
    print(f"graded {len(verdicts)} prediction(s) for {len(answered)} of {len(known)} problems; flags: {flagged}")
    print(f"verdicts: {verdicts_path}")
    print(f"accuracy: {correct}/{len(verdicts)} = {100 * correct / len(verdicts):.2f}%")
    if missing:
        per_problem: dict[str, list[bool]] = {}
        for verdict in verdicts:
            per_problem.setdefault(verdict["id"], []).append(verdict["correct"])
        over_all = sum(sum(marks) / len(marks) for marks in per_problem.values()) / len(known)
        print(f"{missing} problem(s) have no prediction; counting them as wrong: {100 * over_all:.2f}%")
    counts = item_counts(len(verdicts), 0, correct=correct, problems=len(known), answered=len(answered))
    return print_summary(
        "bench math grade", output=verdicts_path, counts=counts, accuracy=round(correct / len(verdicts), 6), flags=flags
    )


# -- run ---------------------------------------------------------------------------------------------------
def pacore_overrides(args: argparse.Namespace, embedded: bool) -> dict[str, Any]:
    """PaCoReConfig fields from the command line: the context window (the embedded model's by default)."""
    from pacore_graph.extend import EMBEDDED_CONTEXT  # noqa: PLC0415

    return {"context_window": args.context_window or EMBEDDED_CONTEXT} if args.context_window or embedded else {}


@summarised("bench math")
def run_command(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    from pacore_benchmarks.math.runner import MathBenchmark, MathReport, MathRunSettings, math_folder  # noqa: PLC0415
    from pacore_benchmarks.math.settings import METHODS  # noqa: PLC0415

    # The embedded SmolLM2 runs at about 110 tokens/s on two cores: without its reply cap (and its context window
    # as the reference budget) a --limit 3 run of the paper's presets would take hours. --max-tokens overrides it.
    from pacore_graph.command_kit import schedules_from_args  # noqa: PLC0415
    from pacore_graph.extend import (  # noqa: PLC0415
        EMBEDDED_MAX_TOKENS,
        EMBEDDED_MODEL,
        PRESETS,
        ChatExplorer,
        RunProgress,
    )
    from pacore_graph.models import configured_url, discover_model, serving  # noqa: PLC0415

    url = configured_url(args.base_url)  # several URLs are refused here, before anything runs
    embedded = url is None
    data = _data_source(args)
    methods = [m for m in comma_list(args.methods) if not m.startswith("pacore+")]
    variants = [m.removeprefix("pacore+") for m in comma_list(args.methods) if m.startswith("pacore+")]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r} in --methods: choose from single, vote, pacore, pacore+OPTION")
    overrides = pacore_overrides(args, embedded)
    max_tokens = args.max_tokens
    if embedded and max_tokens is None:
        max_tokens = EMBEDDED_MAX_TOKENS
    settings = MathRunSettings(
        data=data,
        output=Path(args.output or f"runs/math-{Path(data).stem}"),
        limit=args.limit,
        methods=[method for m in methods for method in METHODS if method == m],  # each a Method, checked above
        schedules=schedules_from_args(args, ["low"] if embedded else list(PRESETS)),
        vote_ks=[int(k) for k in comma_list(args.vote_k)] if args.vote_k else None,
        samples=args.samples,
        pool=args.pool,
        pool_file=Path(args.pool_file) if args.pool_file else None,
        seed=args.seed,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=max_tokens,
        max_concurrency=args.max_concurrency,
        pacore_overrides=overrides,
        coordination=variants,
        budget_tokens=args.budget_tokens,
    )
    _load(args)  # bad data fails before any server starts
    api_key = args.api_key  # None: the server query and the client send $OPENAI_API_KEY
    model_name = args.model or (EMBEDDED_MODEL if url is None else discover_model(url, api_key))
    # The folder is locked and its settings checked now: a run already writing there, or one made with other
    # settings, is refused before a server starts or anything is spent.
    folder = math_folder(settings, model_name, RunProgress(enabled=not args.no_progress)).claim()
    if embedded:
        say(
            f"no --base-url: using the embedded SmolLM2 with max_tokens {max_tokens}, schedules {settings.schedules} "
            "(pass --base-url/--preset/--max-tokens to change)"
        )

    async def run(model: Any) -> MathReport:
        try:
            explorer = ChatExplorer(model, settings.pacore_config([1], 0))
            return await MathBenchmark(settings, explorer, folder=folder).arun()
        finally:
            await model.aclose()

    try:
        with serving(url, model_name, api_key) as model:
            report = asyncio.run(run(model))
    finally:
        folder.release()
    if report.table is not None:
        print(report.table.read_text())
    print(f"results: {report.output / 'results.jsonl'}")
    if report.png is not None:
        print(f"curve:   {report.png}")
        print(f"table:   {report.table}")
    failed = f"{len(report.failures)} unit(s) failed; rerun the same command to retry them (finished work is kept)"
    return print_summary(
        "bench math",
        1 if report.failures else 0,
        output=report.output,
        error=failed if report.failures else None,
        counts=item_counts(
            report.problems,
            len({f.problem_id for f in report.failures}),
            rows=report.rows,
            failed_units=len(report.failures),
        ),
        results=report.output / "results.jsonl",
        curve=report.png,
        table=report.table,
    )
