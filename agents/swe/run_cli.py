"""``pacore swe run``: PaCoRe repair episodes over SWE-bench rows, into a resumable output folder."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pacore_graph.command_kit import add_run_arguments, print_summary, say, summarised, warn

if TYPE_CHECKING:
    from pacore_graph.extend import RunSummary

COMMAND = "swe run"


def register_run(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = subparsers.add_parser(
        "run",
        help="repair SWE-bench instances with PaCoRe over agent episodes",
        description="--protocol episodes: each round runs K repair episodes in fresh sandboxes; later rounds "
        "see the candidate patches as reference responses; the final episode's patch is the prediction. "
        "--protocol per-call: one episode in one sandbox, each model call a PaCoRe run (K proposed replies "
        "per round, synthesised); its patch is the prediction.",
    )
    run.add_argument("--dataset", required=True, help="a .parquet/.jsonl file, a hub name, a task folder, or 'local'")
    add_instances_argument(run, "only these instances")
    run.add_argument(
        "--protocol",
        choices=["episodes", "per-call"],
        default="episodes",
        help="PaCoRe over whole episodes (default), or per model call inside one episode (the paper's)",
    )
    add_run_arguments(
        run,
        output="folder for predictions.jsonl and trajectories/ (rerun to resume)",
        output_required=True,
        concurrency="episodes (sandboxes) running at once over the whole run; with --protocol per-call, model calls "
        "in flight over the whole run, which one step may use all of (default 8)",
        concurrency_default=8,
        max_tokens="cap on each model reply (default: none)",
    )
    add_runtime_arguments(
        run,
        "docker (isolated, default), swerex (sandboxes on the hosts of --hosts FILE, through SWE-ReX) or local "
        "(UNSAFE: commands run on this host as you, and can read your files and pacore's environment, API keys "
        "included, through /proc)",
        choices=["docker", "swerex", "local"],
    )
    run.add_argument("--workers", type=int, default=1, help="instances solved at the same time (default 1)")
    run.add_argument("--step-limit", type=int, default=30, help="model calls per episode (default 30)")
    run.add_argument("--command-timeout", type=float, default=120.0, help="seconds per shell command (default 120)")
    run.add_argument("--temperature", type=float, help="sampling temperature (default 1.0)")
    run.add_argument(
        "--tool-calling",
        choices=["auto", "always", "never"],
        default="auto",
        help="OpenAI tool calls (auto: when the model supports them) or fenced bash blocks",
    )
    run.set_defaults(func=run_command)


def add_runtime_arguments(parser: argparse.ArgumentParser, help: str, *, choices: list[str]) -> None:
    """``--runtime`` and ``--hosts FILE``: the same form in ``swe run`` and ``swe eval``."""
    parser.add_argument("--runtime", choices=choices, default="docker", help=help)
    parser.add_argument(
        "--hosts",
        metavar="FILE",
        help="with --runtime swerex: the sandbox hosts (JSON or YAML; docker daemons, remote SWE-ReX servers, "
        "modal/fargate/daytona; docs/swe-sandboxes.md). Episodes go to the host with the most free slots; a host "
        "that stops answering is left out and its unfinished episodes start again elsewhere",
    )


def open_hosts(args: argparse.Namespace, rows: list[dict[str, Any]], *, caps: dict[str, Any] | None = None) -> Any:
    """The run's :class:`HostPool` for ``--runtime swerex`` (every host reached, images built on its Docker hosts,
    sandboxes of killed runs swept there), or None for the other runtimes; a ``UsageError`` in one line first."""
    from pacore_graph.extend import UsageError

    if args.runtime != "swerex":
        if args.hosts:
            raise UsageError("--hosts goes with --runtime swerex")
        return None
    if not args.hosts:
        raise UsageError("--runtime swerex needs --hosts FILE (the sandbox hosts; docs/swe-sandboxes.md)")
    from pacore_agents.swe.hosts import DockerHost, load_hosts
    from pacore_agents.swe.owners import sweep_orphans
    from pacore_agents.swe.placement import HostPool

    pool = HostPool(load_hosts(args.hosts), caps=caps, log=say)
    pool.connect()
    for host in pool.hosts:
        if isinstance(host.spec, DockerHost) and host.down is None:
            check_images(rows, host.client, where=f"host {host.name}")
            check_rex_servers(rows, host.client, where=f"host {host.name}")
            sweep_orphans(host.client, log=say)
    return pool


def check_rex_servers(rows: list[dict[str, Any]], client: Any, *, where: str) -> None:
    """A ``UsageError`` naming the first row whose image on a Docker host has no SWE-ReX server (an image from
    elsewhere, or built by a pacore before it put one in), before anything starts."""
    from pacore_agents.swe.offline_images import image_for
    from pacore_agents.swe.rex_images import REX_SERVE, has_rex_server
    from pacore_graph.extend import UsageError

    for row in rows:
        image = row["image"] if row.get("pacore_task_dir") else image_for(client, row)
        if image is not None and not has_rex_server(client, image):
            raise UsageError(
                f"{where}: the image {image} of {row['instance_id']} has no SWE-ReX server at {REX_SERVE} (an image "
                f"from elsewhere, or from an older pacore): build it with `pacore swe images build --dataset DATASET "
                f"--instances {row['instance_id']} --repos DIR --rebuild`, or run it with --runtime docker"
            )


def add_instances_argument(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    """``--instances ID ...``: the same form in every ``swe`` command (commas or spaces, repeatable)."""
    parser.add_argument(
        "--instances",
        nargs="+",
        action="extend",
        metavar="ID",
        required=required,
        help=f"{help} (commas or spaces; repeatable)",
    )


@summarised(COMMAND)
def run_command(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from pacore_agents.swe.episodes import SweSolver
    from pacore_agents.swe.owners import sweep_orphans
    from pacore_agents.swe.per_call import per_call_solver
    from pacore_agents.swe.repair_settings import RepairSettings
    from pacore_agents.swe.run import run_counts, run_instances, summary_line, swe_folder
    from pacore_agents.swe.tasks import load_tasks, parse_instances
    from pacore_graph.command_kit import config_from_args
    from pacore_graph.extend import EMBEDDED_MODEL, UsageError
    from pacore_graph.models import configured_url, discover_model, serving

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, not {args.workers}")
    config = config_from_args(args)
    rows = load_tasks(args.dataset, instances=parse_instances(args.instances))
    if args.runtime != "swerex" and args.hosts:
        raise UsageError("--hosts goes with --runtime swerex")
    sampling = {"temperature": config.temperature, "top_p": config.top_p}
    if config.max_tokens is not None:
        sampling["max_tokens"] = config.max_tokens
    settings = RepairSettings(
        step_limit=args.step_limit,
        command_timeout=args.command_timeout,
        tool_calling=args.tool_calling,
        sampling=sampling,
        retry=config.retry,
        runtime=args.runtime,
        threads=max(8, config.max_concurrency),  # one blocking sandbox call per running episode at most
    )
    url = configured_url(args.base_url)
    model_name = args.model or (EMBEDDED_MODEL if url is None else discover_model(url, args.api_key))
    recorded = {
        "dataset": args.dataset,
        "model": model_name,
        "protocol": args.protocol,
        "rounds": config.rounds,
        "runtime": args.runtime,
        "repair": settings.model_dump(mode="json"),
    }
    pool = None
    # Locked, and its fingerprint checked, before images are built or a server starts: a folder in use, or
    # one made with another model or other settings, is refused in one line.
    folder = swe_folder(
        Path(args.output), model_name, config, settings, protocol=args.protocol, settings=recorded
    ).claim()
    try:
        if args.runtime == "local":
            import warnings

            from pacore_agents.swe.local_sandbox import UnsafeRuntimeWarning, sweep_local_orphans

            warn(
                "--runtime local runs the model's commands on this host as you, without isolation: they can read "
                "your files and this process's environment (API keys included)"
            )
            warnings.simplefilter("ignore", UnsafeRuntimeWarning)  # said once above, not once per episode
            sweep_local_orphans(log=say)
        if args.runtime == "docker":
            check_images(rows)
            sweep_orphans(log=say)
        pool = open_hosts(args, rows)
        if pool is not None:
            if args.workers > pool.total_slots:
                raise UsageError(
                    f"--workers {args.workers} is more than the {pool.total_slots} sandbox slot(s) of --hosts: an "
                    "instance in flight needs a slot at least"
                )
            say(f"sandbox hosts: {', '.join(f'{h.name} ({len(h.slots)} slot(s))' for h in pool.hosts)}")

        with serving(url, model_name, args.api_key) as model:

            async def main() -> RunSummary:
                opener = pool.open if pool is not None else None
                if args.protocol == "per-call":
                    solver = per_call_solver(model, config, settings, open_sandbox=opener, progress=folder.progress)
                else:
                    solver = SweSolver(model, config, settings, open_sandbox=opener)
                try:
                    return await run_instances(rows, solver, folder, workers=args.workers)
                finally:
                    solver.close()
                    await model.aclose()

            summary = asyncio.run(main())
    finally:
        if pool is not None:
            pool.close()
        folder.release()
    counts = run_counts(summary, folder, rows)
    say(summary_line(counts, folder))
    failed = len(summary.failed)
    error = f"{failed} instance(s) failed; rerun the same command to retry them" if failed else None
    return print_summary(COMMAND, 1 if summary.failed else 0, output=args.output, counts=counts, error=error)


def check_images(rows: list[dict[str, Any]], client: Any = None, *, where: str | None = None) -> None:
    """Build the local tasks' images (an ``ImageBuildError`` when one fails: a failed run); a ``UsageError``
    naming the other rows' images the Docker host (``client``; the local one by default) lacks, before anything
    else starts.

    A SWE-bench row runs on its official image, or on one built here by ``pacore swe images build``.
    """
    from pacore_agents.swe.docker_sandbox import missing_image_message
    from pacore_agents.swe.images import docker_client, ensure_images
    from pacore_agents.swe.offline_images import image_for
    from pacore_graph.extend import UsageError

    client = client or docker_client()
    ensure_images(rows, client, log=say)
    missing = [row for row in rows if not row.get("pacore_task_dir") and image_for(client, row) is None]
    if missing:
        more = f" ({len(missing) - 1} more rows lack their images too)" if len(missing) > 1 else ""
        prefix = f"{where}: " if where else ""
        raise UsageError(prefix + missing_image_message(missing[0]) + more)
