"""One measured run of the reference pipeline (stepfun-ai/PaCoRe ``base_exp.Exp``), under its own interpreter.

    REFERENCE_VENV/bin/python benchmarks/perf/reference_worker.py '{"base_url": ..., "data": "problems.jsonl", ...}'

Run by path with the interpreter of a scratch venv that has the reference installed (see
:mod:`pacore_benchmarks.perf.reference`), so it imports only the standard library and ``pacore``. It
measures what ``overhead_worker`` measures for the other clients, the same way: an unmeasured warm-up
([1] over one problem), then the reference's own ``async_run`` over every problem, wall time until the
last problem's answer, CPU time to the end (writing its results file included), the process's peak RSS
and its full GC passes. With ``"gc": "spaced"`` in the spec it runs under the thresholds the operator sets
with ``PaCoReConfig(spaced_gc=True)`` (the spec's ``full_pass_threshold``), as the other clients do. The last
stdout line is the measurement as JSON (``overhead_worker.WorkerResult``'s
fields). The reference's own log lines go to stderr, as they do when it runs.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pacore.batch_inference.base_exp import Exp


def reference_class(spec: dict[str, Any], data: str, output: str, rounds: list[int]) -> type[Exp]:
    """``Exp`` configured as a user of the reference would: server, data, schedule, concurrency, seed.

    ``max_tokens`` None: the operator's default sends no ``max_tokens`` (the reference demo's setting),
    so both clients send the same request bodies.
    """
    answered_at: list[float] = []

    class Measured(Exp):  # type: ignore[misc]  # the reference's Exp: its checkout ships no types
        model_name = spec["model"]
        api_base = spec["base_url"].rstrip("/") + "/chat/completions"
        data_path = data
        output_dir = output
        max_tokens = None
        stream = spec.get("stream", False)
        num_responses_per_round = list(rounds)
        max_concurrent = spec.get("concurrency", 1024)
        random_seed = spec.get("seed", 42)

        async def process_single(self, messages: list[dict[str, Any]], request_id: str = "") -> dict[str, Any]:
            result: dict[str, Any] = await super().process_single(messages, request_id)
            answered_at.append(time.perf_counter())
            return result

    Measured.answered_at = answered_at
    return Measured


class FullPassClock:
    """Counts full (oldest-generation) collections, the longest pause and the thresholds in force, as
    ``overhead_worker`` does (a copy: this file runs under the reference's interpreter, where
    pacore_benchmarks is not installed)."""

    def __init__(self) -> None:
        self.passes, self.longest, self._started = 0, 0.0, 0.0
        self.thresholds: Counter[tuple[int, ...]] = Counter()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.thresholds[gc.get_threshold()] += 1
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.passes += 1
            self.longest = max(self.longest, time.perf_counter() - self._started)

    def usual_thresholds(self) -> list[int] | None:
        return list(self.thresholds.most_common(1)[0][0]) if self.thresholds else None

    def seen(self) -> dict[str, int]:
        return {",".join(map(str, thresholds)): count for thresholds, count in self.thresholds.most_common()}


@contextmanager
def spaced_full_passes(spec: dict[str, Any]) -> Iterator[None]:
    """``overhead_worker.spaced_full_passes`` (a copy, for the same reason): with ``"gc": "spaced"``, the oldest
    generation's threshold raised to ``full_pass_threshold`` around a run, put back afterwards unless someone
    changed it meanwhile; otherwise the collector as the process found it."""
    current = gc.get_threshold()
    threshold = int(spec.get("full_pass_threshold", 100))
    applied = (current[0], current[1], threshold)
    if spec.get("gc", "default") != "spaced" or current[0] == 0 or current[2] >= threshold:
        yield
        return
    gc.set_threshold(*applied)
    try:
        yield
    finally:
        if gc.get_threshold() == applied:
            gc.set_threshold(*current)


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def measure(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        first = Path(spec["data"]).read_text().splitlines()[0]
        tiny = Path(scratch) / "warm-up.jsonl"
        tiny.write_text(first + "\n")
        with spaced_full_passes(spec):  # as the operator's warm-up run, under its own config
            await reference_class(spec, str(tiny), str(Path(scratch) / "warm-up"), [1])().async_run()
        measured_class = reference_class(spec, spec["data"], str(Path(scratch) / "out"), spec["rounds"])
        exp = measured_class()  # built outside the clock, as the operator's graph is built inside it: tiny
        clock = FullPassClock()
        gc.callbacks.append(clock)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        with spaced_full_passes(spec):
            rows = await exp.async_run()
        end, cpu = time.perf_counter(), time.process_time() - cpu0
        gc.callbacks.remove(clock)
    answered_at = measured_class.answered_at
    wall = (answered_at[-1] if answered_at else end) - wall0
    responses = [response for row in rows for round_ in row.get("round_responses", []) for response in round_]
    failures = sum(1 for response in responses if not response.get("content"))  # how it records a failed call
    answered = sum(1 for row in rows if str(row.get("final_response") or "").strip())
    return {
        "client": "reference",
        "wall_s": wall,
        "cpu_s": cpu,
        "trajectories": len(responses),
        "failures": failures,
        "answered": answered,
        "completion_tokens": 0,
        "peak_rss_mb": peak_rss_mb(),
        "gc_full_passes": clock.passes,
        "gc_longest_pause_ms": 1000 * clock.longest,
        "gc_thresholds": clock.usual_thresholds(),
        "gc_thresholds_seen": clock.seen(),
    }


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: REFERENCE_PYTHON reference_worker.py '<spec JSON>'", file=sys.stderr)
        return 2
    spec = json.loads(sys.argv[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # as overhead_worker does: a socket per request
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result = asyncio.run(measure(spec))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
