"""``pacore bench ...``: each benchmark registers its own sub-command from its own module."""

from __future__ import annotations

import argparse
import importlib
from functools import partial
from typing import Any

# sub-command name -> module with ``register(subparsers)``; each imported on its own so a missing
# optional extra (math-verify, matplotlib) only takes out the benchmark that needs it, with a line saying so.
BENCHMARKS = {
    "math": "pacore_benchmarks.math.cli",
    "multichallenge": "pacore_benchmarks.multichallenge.cli",
    "overhead": "pacore_benchmarks.perf.overhead_cli",
    "faults": "pacore_benchmarks.perf.faults_cli",
    "instructions": "pacore_benchmarks.perf.instructions_cli",
    "replicas": "pacore_benchmarks.perf.replicas_cli",
    "coordination": "pacore_benchmarks.perf.coordination_cli",
    "escalation": "pacore_benchmarks.perf.escalation_cli",
    "reuse": "pacore_benchmarks.perf.reuse_cli",
    "engine": "pacore_benchmarks.perf.engine_cli",
    "viewer": "pacore_benchmarks.perf.viewer_cli",
    "panel": "pacore_benchmarks.perf.panel_cli",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pacore_graph.command_kit import register_plugins

    bench = subparsers.add_parser("bench", help="evaluation and performance benchmarks")
    inner = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    # A benchmark whose module fails to import (a misspelled name, a missing extra) is named with its error.
    register_plugins(
        inner,
        [
            (f"benchmark {name!r} ({module})", partial(_register_function, module))
            for name, module in BENCHMARKS.items()
        ],
    )


def _register_function(module_name: str) -> Any:
    return importlib.import_module(module_name).register
