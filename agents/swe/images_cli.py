"""``pacore swe images build``: images of local tasks, and of real SWE-bench rows from snapshots, offline."""

from __future__ import annotations

import argparse

from pacore_agents.swe.run_cli import add_instances_argument
from pacore_graph.command_kit import item_counts, print_summary, say, summarised

COMMAND = "swe images build"


def register_images(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    images = subparsers.add_parser(
        "images",
        help="build images for local tasks and real SWE-bench rows without conda or Docker Hub",
        description="Images built on this Docker host (DOCKER_HOST): for local tasks (--dataset local), from "
        "the repositories they carry; for SWE-bench rows, a Debian base (debootstrap) with the Python the "
        "repository version needs, its packages from PyPI (through this host's pip and its configuration, e.g. "
        "a mirror), and the repository at the base commit from --repos. Every image carries SWE-ReX's server "
        "(for --runtime swerex hosts; move an image to another machine with `docker save IMAGE | ssh HOST docker "
        "load`). Containers made from them run without network. Covered repositories and versions: see the README.",
    )
    inner = images.add_subparsers(dest="images_command", required=True, metavar="COMMAND")
    build = inner.add_parser("build", help="build the images of the given rows (skips those up to date)")
    build.add_argument(
        "--dataset",
        required=True,
        help="'local' (the local tasks), a .parquet/.jsonl/.json file of SWE-bench rows, or a hub name",
    )
    add_instances_argument(build, "instance ids (default with --dataset local: every local task)")
    build.add_argument(
        "--repos",
        help="for SWE-bench rows: folder of snapshots: ID.tar.gz (git archive of base_commit), ID/ or owner__name/ "
        "clones (local tasks carry their repositories)",
    )
    build.add_argument("--rebuild", action="store_true", help="rebuild images that already exist")
    build.add_argument(
        "--pypi-before",
        default=None,
        metavar="DATE",
        help="take packages as PyPI had them at DATE (default: 2024-08-01, when SWE-bench Verified's "
        "environments were made; 'now' for today's; needs an index with upload times)",
    )
    build.add_argument("--split", default="test", help="split of a hub dataset")
    build.set_defaults(func=run_build)


@summarised(COMMAND)
def run_build(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pacore_agents.swe.images import ImageBuildError, docker_client, ensure_task_image
    from pacore_agents.swe.offline_images import PYPI_BEFORE, ensure_offline_image
    from pacore_agents.swe.tasks import TaskLoadError, load_tasks, parse_instances
    from pacore_agents.swe.wheelhouse import check_pip_date_filter
    from pacore_graph.extend import UsageError

    instances = parse_instances(args.instances)
    if not instances and args.dataset != "local":
        raise UsageError("--instances is required for SWE-bench rows (each image takes minutes and its own wheels)")
    rows = load_tasks(args.dataset, instances=instances, split=args.split)
    real = [row for row in rows if not row.get("pacore_task_dir")]  # local tasks carry their repositories
    repos = Path(args.repos) if args.repos else None
    if real and repos is None:
        raise UsageError(f"--repos DIR is required for SWE-bench rows ({real[0]['instance_id']}): their snapshots")
    if repos is not None and not repos.is_dir():
        raise TaskLoadError(f"--repos {repos}: not a folder")
    before = None if args.pypi_before == "now" else args.pypi_before or PYPI_BEFORE
    if real and before is not None:
        check_pip_date_filter()  # before any image is built
    client = docker_client()
    images: dict[str, str | None] = {}
    for row in rows:
        try:
            if row.get("pacore_task_dir"):
                images[row["instance_id"]] = ensure_task_image(row, client, log=say, rebuild=args.rebuild)
            else:
                images[row["instance_id"]] = ensure_offline_image(
                    row, repos, client, pypi_before=before, log=say, rebuild=args.rebuild
                )
        except ImageBuildError as exc:
            images[row["instance_id"]] = None
            say(f"{row['instance_id']}: FAILED: {exc}")
            continue
        print(f"{row['instance_id']}\t{images[row['instance_id']]}")
    failed = sum(name is None for name in images.values())
    error = f"{failed} of {len(rows)} image(s) failed to build (above)" if failed else None
    return print_summary(COMMAND, 1 if failed else 0, counts=item_counts(len(rows), failed), error=error, images=images)
