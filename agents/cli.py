"""``pacore swe ...``: the SWE-bench repair agent's sub-commands (``run``, ``eval``, ``images`` and ``bench-hosts``)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pacore_agents.swe.eval_cli import register_eval
    from pacore_agents.swe.hosts_bench import register_bench
    from pacore_agents.swe.images_cli import register_images
    from pacore_agents.swe.run_cli import register_run

    swe = subparsers.add_parser("swe", help="SWE-bench repair episodes in sandboxes, and their evaluation")
    inner = swe.add_subparsers(dest="swe_command", required=True, metavar="COMMAND")
    register_run(inner)
    register_eval(inner)
    register_images(inner)
    register_bench(inner)
