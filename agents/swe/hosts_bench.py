"""``pacore swe bench-hosts``: how placement over SWE-ReX hosts scales, and what a remote command costs pacore.

N scripted episodes per host (a fixed list of commands, one model call to the serving emulator before each,
then the diff), over 1, 2 and 3 hosts of equal slots: each host is a group of SWE-ReX servers in capped
host-network containers on loopback ports of their own, made from a local task's image. Per setting: the
wall time, episodes per minute, and pacore's CPU per remote command (the thread CPU time of the sandbox call
that sends the command and reads its result; the whole process's CPU per command beside it). Settings
alternate, each measured ``--repeats`` times; medians are reported. With 3 hosts the run holds 3N episodes:
weak scaling, whose target is a wall at most 1.15x that of 1 host for N.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pacore_graph.command_kit import comma_list, print_summary, say, summarised

COMMAND = "swe bench-hosts"
DEFAULT_COMMANDS = "ls; cat roman/__init__.py; sleep 1; python3 -c 'print(sum(range(10**5)))'; git status --short"


def register_bench(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser(
        "bench-hosts",
        help="measure episodes over 1, 2 and 3 SWE-ReX hosts: wall, episodes per minute, CPU per remote command",
        description=__doc__,
    )
    bench.add_argument("--episodes", type=int, default=8, help="episodes per host (N; default 8)")
    bench.add_argument("--slots", type=int, default=2, help="SWE-ReX servers per host (default 2)")
    bench.add_argument("--hosts", default="1,2,3", help="host counts to measure (default 1,2,3)")
    bench.add_argument("--commands", default=DEFAULT_COMMANDS, help="each episode's commands, ';'-separated")
    bench.add_argument("--repeats", type=int, default=3, help="runs of each setting, alternating (default 3)")
    bench.add_argument("--output", help="folder for results.jsonl (every run) and table.md")
    bench.set_defaults(func=run_bench)


@summarised(COMMAND)
def run_bench(args: argparse.Namespace) -> int:
    from pacore_agents.swe.images import docker_client, ensure_images
    from pacore_agents.swe.rex_local import LocalServers
    from pacore_agents.swe.tasks import load_tasks
    from pacore_emulator.config import EmulatorConfig
    from pacore_emulator.process import Emulator
    from pacore_graph.models import chat_model

    counts = [int(n) for n in comma_list(args.hosts)]
    commands = [c.strip() for c in args.commands.split(";") if c.strip()]
    [row] = load_tasks("local", instances=["pacore__roman-1"])
    client = docker_client()
    ensure_images([row], client, log=say)
    with (
        tempfile.TemporaryDirectory(prefix="pacore-bench-hosts-") as tmp,
        LocalServers(client, Path(tmp)) as servers,
    ):
        token_file = servers.token_file
        groups = [[server.url for server in servers.start(row["image"], args.slots)] for _ in range(max(counts))]
        config = EmulatorConfig(ttft=0.05, token_delay=0.001, output_tokens=8)
        with Emulator(config).start() as emulator:
            model = chat_model(base_url=emulator.base_url, model=config.model)
            runs: list[dict[str, Any]] = []
            for repeat in range(args.repeats):
                for hosts in counts:
                    result = measure(row, model, groups[:hosts], token_file, args.episodes * hosts, commands)
                    result.update(hosts=hosts, slots=args.slots, repeat=repeat)
                    runs.append(result)
                    say(
                        f"run {repeat + 1}/{args.repeats}, {hosts} host(s) x {args.slots} slot(s): "
                        f"{result['episodes']} episodes in {result['wall_s']:.1f} s, "
                        f"{result['cpu_ms_per_command']:.2f} ms CPU per remote command"
                    )
    rows = summarise(runs, counts)
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
        (out / "table.md").write_text(table(rows, args, commands))
    return print_summary(COMMAND, output=args.output, rows=rows)


def measure(
    row: dict[str, Any], model: Any, groups: list[list[str]], token_file: Path, episodes: int, commands: list[str]
) -> dict[str, Any]:
    """Run ``episodes`` scripted episodes over the hosts (one per group of server URLs), as many at once as slots."""
    from langchain_core.messages import HumanMessage

    from pacore_agents.swe.hosts import HostsFile, RemoteHost
    from pacore_agents.swe.placement import HostPool

    hosts = HostsFile(
        hosts=[
            RemoteHost(name=f"m{n}", kind="remote", urls=urls, token_file=str(token_file))
            for n, urls in enumerate(groups)
        ]
    )
    pool = HostPool(hosts, log=lambda line: None)
    pool.connect()
    lock = threading.Lock()
    command_cpu: list[float] = []

    def episode(number: int) -> None:
        with pool.open(row) as sandbox:
            for step, command in enumerate(commands):
                model.invoke([HumanMessage(f"episode {number} step {step}: the next command?")])
                started = time.thread_time()
                result = sandbox.run(command, timeout=60)
                spent = time.thread_time() - started
                if result.exit_code != 0:
                    raise RuntimeError(f"{command!r} failed: {result.output[-300:]}")
                with lock:
                    command_cpu.append(spent)
            sandbox.diff()

    cpu_before, wall_before = time.process_time(), time.perf_counter()
    try:
        with ThreadPoolExecutor(pool.total_slots) as workers:
            list(workers.map(episode, range(episodes)))
    finally:
        pool.close()
    wall, cpu = time.perf_counter() - wall_before, time.process_time() - cpu_before
    return {
        "episodes": episodes,
        "commands": len(command_cpu),
        "wall_s": round(wall, 3),
        "episodes_per_minute": round(episodes / wall * 60, 2),
        "cpu_ms_per_command": round(statistics.mean(command_cpu) * 1e3, 3),
        "process_cpu_ms_per_command": round(cpu / len(command_cpu) * 1e3, 3),
        "placed": dict(pool.placed),
    }


def summarise(runs: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """Medians per host count, and each wall against one host's."""
    rows = []
    for hosts in counts:
        mine = [run for run in runs if run["hosts"] == hosts]
        rows.append(
            {
                "hosts": hosts,
                "episodes": mine[0]["episodes"],
                **{
                    key: round(statistics.median(run[key] for run in mine), 3)
                    for key in ("wall_s", "episodes_per_minute", "cpu_ms_per_command", "process_cpu_ms_per_command")
                },
            }
        )
    base = next((row["wall_s"] for row in rows if row["hosts"] == 1), None)
    for row in rows:
        row["wall_vs_1_host"] = round(row["wall_s"] / base, 3) if base else None
    return rows


def table(rows: list[dict[str, Any]], args: argparse.Namespace, commands: list[str]) -> str:
    lines = [
        f"{args.episodes} episodes per host, {args.slots} slots per host, medians of {args.repeats}; "
        f"commands: {'; '.join(commands)}",
        "",
        "| hosts | episodes | wall s | vs 1 host | episodes/min | pacore CPU ms per remote command "
        "| process CPU ms per command |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['hosts']} | {row['episodes']} | {row['wall_s']} | {row['wall_vs_1_host']}x | "
            f"{row['episodes_per_minute']} | {row['cpu_ms_per_command']} | {row['process_cpu_ms_per_command']} |"
        )
    return "\n".join(lines) + "\n"
