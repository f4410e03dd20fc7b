"""``pacore swe images build``: images for real SWE-bench rows from repository snapshots, offline."""

from __future__ import annotations

import argparse

from pacore_agents.swe.run_cli import add_instances_argument
from pacore_graph.command_kit import item_counts, print_summary, say, summarised

COMMAND = "swe images build"


def register_images(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    images = subparsers.add_parser(
        "images",
        help="build images for real SWE-bench rows without conda or Docker Hub",
        description="Images for SWE-bench rows built on this Docker host: a Debian base (debootstrap) with "
        "the Python the repository version needs, its packages from PyPI (through this host's pip and its "
        "configuration, e.g. a mirror), and the repository at the base commit from --repos. Containers "
        "made from them run without network. Covered repositories and versions: see the README.",
    )
    inner = images.add_subparsers(dest="images_command", required=True, metavar="COMMAND")
    build = inner.add_parser("build", help="build the images of the given rows (skips those that exist)")
    build.add_argument("--dataset", required=True, help="a .parquet/.jsonl/.json file of SWE-bench rows, or a hub name")
    add_instances_argument(build, "instance ids", required=True)
    build.add_argument(
        "--repos",
        required=True,
        help="folder of snapshots: ID.tar.gz (git archive of base_commit), ID/ or owner__name/ clones",
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

    from pacore_agents.swe.images import ImageBuildError, docker_client
    from pacore_agents.swe.offline_images import PYPI_BEFORE, ensure_offline_image
    from pacore_agents.swe.tasks import TaskLoadError, load_tasks, parse_instances
    from pacore_agents.swe.wheelhouse import check_pip_date_filter

    repos = Path(args.repos)
    before = None if args.pypi_before == "now" else args.pypi_before or PYPI_BEFORE
    if not repos.is_dir():
        raise TaskLoadError(f"--repos {repos}: not a folder")
    rows = load_tasks(args.dataset, instances=parse_instances(args.instances), split=args.split)
    if before is not None:
        check_pip_date_filter()  # before any image is built
    client = docker_client()
    images: dict[str, str | None] = {}
    for row in rows:
        try:
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
