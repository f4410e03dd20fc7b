"""``pacore bench math export-train``: the command line of ``export.py``.

The pool decides the model: a run that only reads a pool (a math run's ``pool.jsonl``) takes the model and
token cap it was made with, and starts no server unless something is left to generate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from pacore_benchmarks.math.cli import _data_source, _load, pacore_overrides
from pacore_graph.command_kit import item_counts, print_summary, say, summarised

COMMAND = "bench math export-train"


def _interval(name: str, low: float | None, high: float | None) -> str:
    """``message accuracy in (0, 0.375)``, or ``no message-accuracy filter``."""
    if low is None and high is None:
        return f"no {name} filter"
    return f"{name} in ({'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'})"


@summarised(COMMAND)
def export_command(args: argparse.Namespace) -> int:
    from pacore_benchmarks.math.export import ExportReport, TrainExport, export_folder  # noqa: PLC0415
    from pacore_benchmarks.math.pool import pool_identity  # noqa: PLC0415
    from pacore_benchmarks.math.settings import ExportSettings  # noqa: PLC0415
    from pacore_graph.extend import EMBEDDED_MAX_TOKENS, EMBEDDED_MODEL, ChatExplorer, RunProgress  # noqa: PLC0415
    from pacore_graph.models import configured_url, discover_model, serving  # noqa: PLC0415

    url = configured_url(args.base_url)  # several URLs are refused here, before anything runs
    embedded = url is None
    data = _data_source(args)
    output = Path(args.output or f"runs/train-{Path(data).stem}")
    pool_file = Path(args.pool_file) if args.pool_file else None
    made_by = pool_identity(pool_file or output / "pool.jsonl")
    max_tokens = args.max_tokens
    if max_tokens is None:
        max_tokens = made_by[1] if made_by else (EMBEDDED_MAX_TOKENS if embedded else None)
    settings = ExportSettings(
        data=data,
        output=output,
        limit=args.limit,
        pool=args.pool,
        pool_file=pool_file,
        seed=args.seed,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=max_tokens,
        max_concurrency=args.max_concurrency,
        pacore_overrides=pacore_overrides(args, embedded),
        min_message_accuracy=args.min_message_accuracy,
        max_message_accuracy=args.max_message_accuracy,
        synthesis_samples=args.synthesis_samples,
        min_synthesis_accuracy=args.min_synthesis_accuracy,
        max_synthesis_accuracy=args.max_synthesis_accuracy,
    )
    _load(args)  # bad data fails before any server starts
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY")
    model_name = args.model or (made_by[0] if made_by else None)
    model_name = model_name or (EMBEDDED_MODEL if url is None else discover_model(url, api_key))
    folder = export_folder(settings, model_name, RunProgress(enabled=not args.no_progress)).claim()
    try:
        export = TrainExport(settings, None, model_name=model_name, folder=folder)
        trajectories, syntheses = export.pending()
        if trajectories or syntheses:
            if embedded and model_name != EMBEDDED_MODEL:
                raise ValueError(
                    f"{model_name!r} (the pool's model, or --model) is not the embedded one: pass --base-url of a "
                    "server that serves it to generate the rest"
                )
            todo = f"{trajectories} pool trajectories" if trajectories else f"{syntheses} synthesis runs"
            where = f"the embedded SmolLM2 (max_tokens {max_tokens})" if embedded else url
            say(f"export-train: {todo} to generate with {model_name} at {where}")

            async def run(model: Any) -> ExportReport:
                try:
                    export.explorer = ChatExplorer(model, settings.pacore_config([1], 0))
                    return await export.arun()
                finally:
                    await model.aclose()

            with serving(url, model_name, api_key) as model:
                report = asyncio.run(run(model))
        else:
            say("export-train: nothing to generate, exporting from the pool and the results there")
            report = asyncio.run(export.arun())
    finally:
        folder.release()
    counts = report.counts
    stage1 = _interval("message accuracy", settings.min_message_accuracy, settings.max_message_accuracy)
    print(f"{counts.problems} problems, {counts.pooled} pooled; stage 1 ({stage1}) kept {counts.stage1}")
    if counts.synthesized is not None:
        stage2 = _interval("synthesis accuracy", settings.min_synthesis_accuracy, settings.max_synthesis_accuracy)
        samples = settings.synthesis_samples
        print(f"stage 2 ({samples} samples, {stage2}) kept {counts.exported} of {counts.synthesized}")
    print(f"{counts.exported} rows exported")
    print(f"export:     {report.export}")
    print(f"summary:    {report.summary}")
    if report.png is not None:
        print(f"histograms: {report.png}")
    failed = f"{len(report.failures)} problem(s) failed; rerun the same command to retry them (finished work is kept)"
    return print_summary(
        COMMAND,
        1 if report.failures else 0,
        output=settings.output,
        error=failed if report.failures else None,
        counts=item_counts(counts.problems, len(report.failures), **counts.model_dump(exclude={"problems"})),
        export=report.export,
        summary=report.summary,
        histograms=report.png,
    )
