"""``pacore bench replicas [--quick]``: routing over emulated replicas, a table per workload, then one JSON object.

The last line printed is JSON with ``prefill_ratio_best_vs_spread``, ``wall_ratio_best_vs_spread``, ``lost``
(under the best policy with a replica killed mid-run) and ``default_policy``, all on the batch workload, with
``prefill_floor_ratio_vs_spread``: the least any routing could compute of the spreading's requests (each distinct
prefix once), over what the spreading computed, the lowest the headline ratio can go on that run;
then ``one_at_a_time_wall_ratio_default_vs_spread``, ``one_at_a_time_fastest_policy`` and
``one_at_a_time_wall_ratio_fastest_vs_default`` with one problem at a time; then
``chat_prefill_ratio_default_vs_spread``, ``chat_wall_ratio_default_vs_spread`` and ``chat_best_policy`` on the chat
and agent workload (plus every run's figures).
"""

from __future__ import annotations

import argparse

from pacore_graph.command_kit import print_summary, summarised

COMMAND = "bench replicas"
TARGETS = {"prefill_ratio": 0.5, "wall_ratio": 1.0}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replicas", help="PaCoRe workloads over 4 emulated GPU replicas: client spreading vs vllm-router policies"
    )
    parser.add_argument("--quick", action="store_true", help="4 problems per schedule and kind, one alone: a minute")
    parser.add_argument("--problems", type=int, help="problems per schedule (default 8; quick 4)")
    parser.add_argument("--one-at-a-time", type=int, help="[32, 4] problems solved each alone (default 2; quick 1)")
    parser.add_argument("--chat-problems", type=int, help="conversations and agent steps each (default 8; quick 4)")
    parser.add_argument("--replicas", type=int, help="emulated replicas (default 4)")
    parser.add_argument("--no-kill", action="store_true", help="skip the runs with a replica killed mid-run")
    parser.add_argument("--log-dir", help="keep the routers' logs here (default: a temporary folder)")
    parser.set_defaults(func=main)


@summarised(COMMAND)
def main(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console
    from rich.table import Table

    from pacore_benchmarks.perf.replicas import PolicyRun, ReplicasSettings, run_benchmark
    from pacore_benchmarks.perf.replicas_workloads import AGENT_SCHEDULE, CHAT, CONVERSATION_SCHEDULE, ONE, PACORE

    settings = ReplicasSettings.from_command_line(
        args.quick,
        problems=args.problems,
        one_at_a_time=args.one_at_a_time,
        chat_problems=args.chat_problems,
        replicas=args.replicas,
        kill=False if args.no_kill else None,
    )
    console = Console(stderr=True)

    def progress(run: PolicyRun) -> None:
        killed = f", replica {run.killed} killed" if run.killed is not None else ""
        console.print(
            f"{run.workload} workload, {run.policy}{killed}: {run.wall_s} s, "
            f"{run.prefill_tokens} prefill tokens, lost {run.lost}"
        )

    schedules = " and ".join(str(s) for s in settings.schedules)
    titles = {
        PACORE: f"PaCoRe workload: {settings.problems} problems each of {schedules}",
        ONE: f"one at a time: {settings.one_at_a_time} problems [32, 4], each alone",
        CHAT: f"chat workload: {settings.chat_problems} conversations {CONVERSATION_SCHEDULE} and "
        f"{settings.chat_problems} agent steps {AGENT_SCHEDULE}",
    }
    workloads = list(settings.workloads())
    console.print(f"{' / '.join(titles[name] for name in workloads)}; {settings.replicas} emulated replicas")
    report = asyncio.run(run_benchmark(settings, args.log_dir, on_run=progress))

    for name in workloads:
        table = Table(title=titles[name])
        # 100 columns: prompt tokens and requests per replica are in the JSON summary line
        for column in (
            "routing",
            "wall s",
            "prefill tokens",
            "prefill/prompt",
            "prefill/floor",
            "busy max/mean",
            "decode max/mean",
            "lost",
            "retries",
        ):
            table.add_column(column, justify="left" if column == "routing" else "right")
        for run in [*report.of(name), *(report.kills if name == PACORE else [])]:
            routing = run.policy + (f" (replica {run.killed} killed)" if run.killed is not None else "")
            table.add_row(
                routing,
                f"{run.wall_s:.1f}",
                str(run.prefill_tokens),
                f"{run.prefill_ratio:.2f}",
                f"{run.over_floor:.2f}",
                f"{run.balance:.2f}",
                f"{run.decode_balance:.2f}",
                str(run.lost),
                str(run.retries),
            )
        Console(width=100).print(table)
    summary = report.summary()
    ratio = summary["prefill_ratio_best_vs_spread"]
    met = "met" if ratio <= TARGETS["prefill_ratio"] else "missed"
    console.print(
        f"{summary['default_policy']} computes {ratio} of the spreading's prefill (target at most "
        f"{TARGETS['prefill_ratio']}: {met}); the least any routing could compute is "
        f"{summary['prefill_floor_ratio_vs_spread']} of it (each distinct prefix once)"
    )
    missed = [
        f"{name} {summary[key]} > {TARGETS[name]}"
        for name, key in (
            ("prefill_ratio", "prefill_ratio_best_vs_spread"),
            ("wall_ratio", "wall_ratio_best_vs_spread"),
        )
        if summary[key] > TARGETS[name]
    ] + ([f"lost {summary['lost']}"] if summary["lost"] else [])
    error = f"missed target(s): {', '.join(missed)}" if missed else None
    counts = {"replicas": settings.replicas, "runs": len(report.runs) + len(report.kills)}
    return print_summary(COMMAND, 1 if missed else 0, output=args.log_dir, counts=counts, error=error, **summary)
