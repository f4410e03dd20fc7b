"""``pacore bench multichallenge``: PaCoRe (or a plain call) on MultiChallenge, judged by an LLM.

The judge is the official MultiChallenge judge request (``--judge-prompt official``) sent to the model
you name with ``--judge-base-url``/``--judge-model``/``--judge-api-key``; the official evaluation used
gpt-4o-2024-08-06. Left out, the judge is the responder itself, with a loud warning: a model grading its
own answers. Both default to the embedded SmolLM2 server, so the command runs on a fresh machine; on the
embedded model responses and judge replies are capped at 512 tokens unless ``--max-tokens`` /
``--judge-max-tokens`` say otherwise (a 135M model left uncapped tends to ramble to the end of its context).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pacore_graph.command_kit import (
    CommandParser,
    add_alias,
    item_counts,
    print_summary,
    run_command_line,
    summarised,
    warn,
)

if TYPE_CHECKING:  # imported on first use at run time: `pacore --help` stays quick
    from rich.console import Console

    from pacore_benchmarks.multichallenge.data import Conversation, Dataset
    from pacore_benchmarks.multichallenge.runner import RunOutcome
    from pacore_benchmarks.multichallenge.scoring import Scores
    from pacore_benchmarks.multichallenge.settings import RunSettings
    from pacore_graph import RunFolder
    from pacore_graph.extend import ResultsFile

COMMAND = "bench multichallenge"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "multichallenge",
        help="MultiChallenge multi-turn chat benchmark (responses through PaCoRe, LLM judge)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=main)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pacore_benchmarks.multichallenge.data import DEFAULT_DATA
    from pacore_graph.command_kit import add_run_arguments
    from pacore_graph.extend import EMBEDDED_MAX_TOKENS

    parser.add_argument("--data", metavar="PATH", help=DEFAULT_DATA.help("benchmark_questions.jsonl path or hub name"))
    parser.add_argument("--limit", type=int, help="first N conversations (after --axis)")
    parser.add_argument("--axis", help="only this axis, e.g. INFERENCE_MEMORY")
    add_run_arguments(
        parser,
        role="responder",
        concurrency="model calls (trajectories) in flight at most over the whole run (default 256)",
        concurrency_default=256,
        max_tokens=f"cap per generated message; 0 = none (default: none, {EMBEDDED_MAX_TOKENS} on the embedded model)",
        output="results folder; rerun into it to resume (default: runs/multichallenge-<schedule>)",
    )
    parser.add_argument(
        "--judge-base-url",
        action="append",
        metavar="URL",
        help="judge server, e.g. https://api.openai.com/v1 (default: the responder's: self-judging, with a warning)",
    )
    parser.add_argument(
        "--judge-model",
        help="judge model, officially gpt-4o-2024-08-06 (default: --model on the responder's server, "
        "else the judge server's first model)",
    )
    parser.add_argument("--judge-api-key", help="judge API key (default: --api-key, else $OPENAI_API_KEY)")
    parser.add_argument(
        "--judge-prompt",
        choices=["official", "project"],
        default="official",
        help="official: the MultiChallenge judge request byte for byte (default); project: this project's own prompt",
    )
    parser.add_argument("--samples", type=int, default=1, help="samples per conversation (paper: 8)")
    parser.add_argument("--workers", type=int, default=4, help="conversations in flight at once (default 4)")
    add_alias(parser, "workers", "--concurrency", type=int)
    parser.add_argument(
        "--judge-max-tokens",
        type=int,
        help=f"cap on a judge reply; 0 = none (default: none, as the official judge; {EMBEDDED_MAX_TOKENS} on the "
        "embedded model)",
    )
    parser.add_argument(
        "--context-window",
        type=int,
        help="responder context in tokens, for capping references (default: the embedded server's, else unknown)",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="responder sampling temperature")
    parser.add_argument("--seed", type=int, default=42, help="seed of the reference shuffle")


def _schedule(args: argparse.Namespace) -> tuple[list[int], str | None]:
    from pacore_graph.extend import PRESETS, parse_rounds

    if args.rounds is not None:
        return parse_rounds(args.rounds), None
    preset = args.preset or "low"
    return list(PRESETS[preset]), preset


def _default_output(rounds: list[int], preset: str | None) -> str:
    label = preset or ("baseline" if not rounds else "rounds-" + "-".join(map(str, rounds)))
    return str(Path("runs") / f"multichallenge-{label}")


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    from pacore_benchmarks.multichallenge.data import DEFAULT_DATA, load_dataset, select
    from pacore_benchmarks.multichallenge.runner import run_folder
    from pacore_benchmarks.multichallenge.settings import RunSettings
    from pacore_graph import PaCoReConfig
    from pacore_graph.extend import EMBEDDED_CONTEXT, EMBEDDED_MAX_TOKENS, RunProgress, UsageError
    from pacore_graph.models import configured_url

    rounds, preset = _schedule(args)
    PaCoReConfig(rounds=rounds)  # one clear message for a bad schedule, before anything runs
    for name in ("samples", "workers"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    base_url = configured_url(args.base_url)  # one URL each (a repeated flag is refused)
    # The judge defaults to the responder's endpoint and model (warned about below).
    judge_url = configured_url(args.judge_base_url) if args.judge_base_url else base_url
    embedded = base_url is None
    max_tokens = args.max_tokens if args.max_tokens is not None else (EMBEDDED_MAX_TOKENS if embedded else None)
    judge_max_tokens = args.judge_max_tokens
    if judge_max_tokens is None and judge_url is None:
        judge_max_tokens = EMBEDDED_MAX_TOKENS
    settings = RunSettings(
        data=DEFAULT_DATA.source(args.data),
        output=args.output or _default_output(rounds, preset),
        limit=args.limit,
        axis=args.axis.upper() if args.axis else None,
        base_url=base_url,
        model=args.model,
        judge_base_url=judge_url,
        judge_model=args.judge_model or (None if args.judge_base_url else args.model),
        judge_prompt=args.judge_prompt,
        rounds=rounds,
        preset=preset,
        samples=args.samples,
        workers=args.workers,
        max_concurrency=args.max_concurrency,
        max_tokens=max_tokens or None,
        judge_max_tokens=judge_max_tokens or None,
        temperature=args.temperature,
        seed=args.seed,
        context_window=args.context_window or (EMBEDDED_CONTEXT if embedded else None),
    )
    dataset = DEFAULT_DATA.read(args.data, load_dataset)
    conversations = select(dataset.conversations, axis=settings.axis, limit=settings.limit)
    # Locked, and its fingerprint checked, before a server starts: a folder in use or made by another run is refused.
    folder = run_folder(settings, RunProgress())
    folder.claim()
    keys = Keys(responder=args.api_key, judge=args.judge_api_key or args.api_key)
    try:
        return asyncio.run(_run(settings, dataset, conversations, keys, folder))
    finally:
        folder.release()


class Keys(NamedTuple):
    """API keys: passed along, never written to run.json or the report (None: $OPENAI_API_KEY)."""

    responder: str | None
    judge: str | None


def _warn_self_judging(settings: RunSettings, console: Console | None = None) -> None:
    """The self-judging warning: a ``pacore: warning:`` line on stderr, or (``console``) in the printed report."""
    from pacore_benchmarks.multichallenge.report import self_judging_warning

    warning = self_judging_warning(settings)
    if warning and console is None:
        warn(warning)
    elif warning and console is not None:
        console.print(f"[bold red]WARNING:[/] [red]{warning}[/]", highlight=False, soft_wrap=True)


async def _run(
    settings: RunSettings, dataset: Dataset, conversations: list[Conversation], keys: Keys, folder: RunFolder
) -> int:
    from rich.console import Console

    from pacore_benchmarks.multichallenge.runner import RunOutcome, problem_id, row_key
    from pacore_graph import PaCoReError

    console = Console()
    output = Path(settings.output)
    for skipped in dataset.skipped:
        console.print(f"[yellow]skipped malformed row {skipped.where}:[/] {skipped.reason}", highlight=False)
    results = folder.results
    wanted = {problem_id(c.question_id, s) for c in conversations for s in range(settings.samples)}
    pending = len(wanted - results.done())
    console.print(
        f"MultiChallenge: {len(conversations)} conversations x {settings.samples} sample(s), "
        f"{settings.schedule_label()}; {len(wanted) - pending} done, {pending} to run -> {output}",
        soft_wrap=True,
    )
    outcome = RunOutcome()
    if pending:
        _warn_self_judging(settings)
        try:
            outcome = await _respond_and_judge(settings, conversations, folder, console, keys)
        except _Fatal as exc:
            _write_reports(settings, dataset, conversations, results, console)
            raise PaCoReError(str(exc)) from None
    unfinished = len(wanted - results.done())
    for line in outcome.unfinished[:20]:
        console.print(f"[yellow]unfinished {line}[/]", highlight=False)
    scores = _write_reports(settings, dataset, conversations, results, console)
    failed = f"{unfinished} row(s) unfinished: rerun the same command to finish them" if unfinished else None
    passed = sum(bool(row.get("passed")) for row in results.rows if row_key(row) in wanted)
    counts = item_counts(
        len(wanted),
        unfinished,
        conversations=len(conversations),
        passed=passed,
        response_errors=scores.response_errors,
        judge_errors=scores.judge_errors,
    )
    return print_summary(
        COMMAND,
        1 if unfinished else 0,
        output=output,
        counts=counts,
        error=failed,
        pass_at_1=scores.overall_pass_at_1,
        official=scores.overall_official,
    )


class _Fatal(Exception):
    """A server cannot be used at all (unreachable, unknown model): stop, keep what is written."""


async def _respond_and_judge(
    settings: RunSettings, conversations: list[Conversation], folder: RunFolder, console: Console, keys: Keys
) -> RunOutcome:
    from pacore_benchmarks.multichallenge.judge import OFFICIAL_EXTRA_BODY
    from pacore_benchmarks.multichallenge.runner import MultiChallengeRunner
    from pacore_graph import PaCoReError, chat_model
    from pacore_graph.models import check_server, serving

    clients: list[Any] = []  # closed however the run ends
    with ExitStack() as stack:
        try:
            try:
                if not settings.base_url:
                    console.print("starting the embedded SmolLM2 server ...")
                responder = stack.enter_context(serving(settings.base_url, settings.model, keys.responder))
                clients.append(responder)
                check_server(responder)  # one clear line instead of hundreds of rows of connection errors
                # The judge has a client of its own, sending what the official one sends, even on the same server.
                judge_args = (settings.judge_model, keys.judge)
                if settings.judge_base_url == settings.base_url:  # the embedded server included
                    judge = chat_model(responder.base_url, *judge_args, extra_body=OFFICIAL_EXTRA_BODY)
                else:
                    judge = stack.enter_context(
                        serving(settings.judge_base_url, *judge_args, extra_body=OFFICIAL_EXTRA_BODY)
                    )
                clients.append(judge)
                check_server(judge)
            except PaCoReError as exc:
                raise _Fatal(str(exc)) from None
            async with folder:
                runner = MultiChallengeRunner(
                    settings,
                    responder=responder,
                    judge_model=judge,
                    folder=folder,
                    context_window=settings.context_window,
                )
                passed = 0

                def on_done(row: dict[str, Any] | None) -> None:
                    nonlocal passed
                    passed += bool(row and row.get("passed"))
                    folder.progress.advance("conversations", 0, note=f"passed {passed}")

                return await runner.arun(conversations, on_done=on_done)
        finally:
            await _close(*clients)


async def _close(*models: Any) -> None:
    for model in {id(m): m for m in models}.values():
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()


def _write_reports(
    settings: RunSettings, dataset: Dataset, conversations: list[Conversation], results: ResultsFile, console: Console
) -> Scores:
    from collections import Counter

    from pacore_benchmarks.multichallenge.report import markdown_report, plot_scores, print_summary
    from pacore_benchmarks.multichallenge.scoring import score_rows

    output = Path(settings.output)
    wanted = {c.question_id: c.axis for c in conversations}
    rows = [r for r in results.rows if r["question_id"] in wanted and int(r["sample"]) < settings.samples]
    scores = score_rows(rows, wanted, settings.samples)
    print_summary(scores, settings, console)
    _warn_self_judging(settings, console)
    plot = output / "axis_scores.png"
    has_plot = bool(rows) and plot_scores(scores, plot)
    formats = Counter(r["judge_format"] for r in rows if r.get("judge_format"))
    report = markdown_report(
        scores, settings, skipped=dataset.skipped, judge_formats=formats, plot_name=plot.name if has_plot else None
    )
    (output / "report.md").write_text(report, encoding="utf-8")
    (output / "scores.json").write_text(scores.model_dump_json(indent=2), encoding="utf-8")
    console.print(f"rows: {results.path}\nreport: {output / 'report.md'}", soft_wrap=True)
    return scores


def cli(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m pacore_benchmarks.multichallenge.cli``), same as ``pacore bench``."""
    parser = CommandParser(prog="pacore bench multichallenge", description=__doc__)
    add_arguments(parser)
    parser.set_defaults(func=main)
    return run_command_line(parser, argv)


if __name__ == "__main__":
    sys.exit(cli())
