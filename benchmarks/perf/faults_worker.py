"""A benchmark-style PaCoRe run over synthetic problems, resumable, meant to be killed and restarted.

    python -m pacore_benchmarks.perf.faults_worker --base-url URL --model M --output DIR --problems 8

It is what ``pacore bench faults`` runs in a subprocess and kills with SIGKILL; it runs on the batch engine
(``pacore_graph.RunFolder``): results go to ``DIR/results.jsonl`` (one atomic row per problem), checkpoints
to ``DIR/checkpoints.sqlite``. A line ``DONE <id> <status>`` is printed as each problem's row is made; the
last line is the run summary as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from pacore_graph import EpisodeContext, PaCoReConfig, Problem, RunFolder
from pacore_graph.extend import ProblemOutcome, RetryPolicy, Trajectory, parse_rounds

RESULTS_FILE = "results.jsonl"


def synthetic_problems(count: int) -> list[Problem]:
    """Distinct small problems (the emulator derives each reply from the prompt)."""
    return [
        Problem(id=f"p{number:03d}", messages=f"Problem {number}: how many pairs (a, b) with a + b = {number + 7}?")
        for number in range(count)
    ]


def result_row(outcome: ProblemOutcome) -> dict[str, Any] | None:
    """One results row: the answer, TTC and every trajectory's record; a failed problem is left to a rerun."""
    result = outcome.result
    if result is None:
        return None
    return {
        "id": outcome.problem.id,
        "answer": result.answer,
        "ttc": result.ttc,
        "rounds": [
            {
                "round_index": record.round_index,
                "k": record.k,
                "trajectories": [
                    {
                        "index": t.index,
                        "error": t.error,
                        "error_type": t.error_type,
                        "attempts": t.attempts,
                        "finish_reason": t.finish_reason,
                        "completion_tokens": t.completion_tokens,
                        "usable": t.usable,
                    }
                    for t in record.trajectories
                ],
            }
            for record in result.rounds
        ],
    }


def scenario_config(
    rounds: list[int], *, max_concurrency: int, request_timeout: float, max_tokens: int | None = None
) -> PaCoReConfig:
    """Short timeouts and quick backoff: the emulator answers in well under a second."""
    retry = RetryPolicy(max_attempts=8, initial_delay=0.05, max_delay=0.5, backoff=2.0, jitter=0.5)
    return PaCoReConfig(
        rounds=rounds,
        max_concurrency=max_concurrency,
        request_timeout=request_timeout,
        retry=retry,
        max_tokens=max_tokens,
    )


class CallLog:
    """Wraps an explorer and appends one line per finished call: requests counted at the client, for
    servers that keep no request log (the embedded model)."""

    def __init__(self, explorer: Any, path: Path):
        self.explorer = explorer
        self.path = path

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        trajectory: Trajectory = await self.explorer.explore(messages, episode)
        with self.path.open("a", encoding="utf-8") as log:
            log.write(json.dumps({"round": round_index, "index": index}) + "\n")
        return trajectory


def fingerprint(model: str, config: PaCoReConfig) -> dict[str, Any]:
    return {"model": model, **config.model_dump(mode="json", exclude={"max_concurrency", "request_timeout", "retry"})}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from pacore_graph.extend import ChatExplorer
    from pacore_graph.models import OpenAICompatibleChatModel

    config = scenario_config(
        parse_rounds(args.rounds),
        max_concurrency=args.max_concurrency,
        request_timeout=args.request_timeout,
        max_tokens=args.max_tokens,
    )
    model = OpenAICompatibleChatModel(base_url=args.base_url, model=args.model)
    explorer: Any = ChatExplorer(model, config)
    if args.call_log:
        explorer = CallLog(explorer, Path(args.call_log))

    def printed_row(outcome: ProblemOutcome) -> dict[str, Any] | None:
        row = result_row(outcome)
        if row is not None:
            print(f"DONE {outcome.problem.id} {outcome.status}", flush=True)
        return row

    try:
        async with RunFolder(args.output, fingerprint=fingerprint(args.model, config), progress=False) as folder:
            summary = await folder.run(
                explorer,
                config,
                synthetic_problems(args.problems),
                printed_row,
                concurrency=args.problems_in_flight,
                salt=[args.model],
            )
    finally:
        await model.aclose()
    return summary.model_dump()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pacore_benchmarks.perf.faults_worker", description=__doc__)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--output", required=True, help="output folder (results and checkpoints)")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--rounds", default="16")
    parser.add_argument("--max-concurrency", type=int, default=64)
    parser.add_argument("--problems-in-flight", type=int, default=1)
    parser.add_argument("--request-timeout", type=float, default=2.0)
    parser.add_argument("--max-tokens", type=int, help="cap per generated message (the embedded model needs one)")
    parser.add_argument("--call-log", help="append one JSON line per finished model call to this file")
    args = parser.parse_args(argv)
    summary = asyncio.run(run(args))
    print(json.dumps(summary), flush=True)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
