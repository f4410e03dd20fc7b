"""``pacore bench ...``: each benchmark registers its own sub-command from its own module."""

from __future__ import annotations

import argparse
import importlib

# sub-command name -> module with ``register(subparsers)``; imported lazily so a missing
# optional extra (math-verify, matplotlib) only breaks the benchmark that needs it.
BENCHMARKS = {
    "math": "pacore_benchmarks.math.cli",
    "multichallenge": "pacore_benchmarks.multichallenge.cli",
    "overhead": "pacore_benchmarks.perf.overhead_cli",
    "faults": "pacore_benchmarks.perf.faults_cli",
    "replicas": "pacore_benchmarks.perf.replicas_cli",
    "coordination": "pacore_benchmarks.perf.coordination_cli",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="evaluation and performance benchmarks")
    inner = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for module_name in BENCHMARKS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("pacore_benchmarks"):
                continue  # not written yet
            raise
        module.register(inner)
