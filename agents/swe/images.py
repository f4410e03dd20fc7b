"""Docker images built without any registry: Debian bases, and the local task suite's images.

There is no Docker Hub here: a base image is a Debian root file system made by ``debootstrap`` and
turned into an image with an import (one per release; ``offline_images.py`` builds real SWE-bench rows
on them). Each local task image is a thin layer on the bookworm base with SWE-ReX's server
(``rex_images.py``): the task's repository, committed with a fixed author and date so that the commit
hash is the row's ``base_commit``. Images are cached by name and rebuilt only when what they are made of
changes (a content-hash label covering the task's files and the recipe of the image it is built on).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docker import DockerClient  # docker-py ships no types: Any to the checker

BASE_RELEASE = "bookworm"  # the local tasks' base; real rows pick theirs by Python version (specs.py)
BASE_IMAGE = f"pacore-swe.base:{BASE_RELEASE}"
TASK_BASE_IMAGE = f"pacore-swe.rex:{BASE_RELEASE}"  # the base plus SWE-ReX's server (rex_images.py)
BASE_PACKAGES = ("python3", "python3-venv", "python3-pytest", "git", "patch", "ca-certificates")
BUILDER_PACKAGES = (*BASE_PACKAGES, "gcc", "libc6-dev", "python3-dev")  # compiles source-only packages
BASE_RECIPE_LABEL = "pacore.base_recipe"
CONTAINER_WORKDIR = "/testbed"
TASK_HASH_LABEL = "pacore.task_hash"
LOCK_DIR = Path(tempfile.gettempdir())

# A fixed identity and date make `git commit` reproducible: the same files give the same hash on the
# host (to write the row) and in the image (to check it).
GIT_ENV = {
    "GIT_AUTHOR_NAME": "pacore",
    "GIT_AUTHOR_EMAIL": "pacore@localhost",
    "GIT_COMMITTER_NAME": "pacore",
    "GIT_COMMITTER_EMAIL": "pacore@localhost",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
}
_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".git"}
# Kept out of `git status` / the episode's diff; written to .git/info/exclude, so it is not part of the
# commit (and the task folders need no dot-files, which package data would drop).
GIT_EXCLUDES = ("__pycache__/", "*.pyc", ".pytest_cache/")

Log = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which and why."""


def docker_client() -> DockerClient:
    """A docker-py client from the environment (honours DOCKER_HOST), with a clear error if none."""
    import docker

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # docker raises several unrelated types here
        where = os.environ.get("DOCKER_HOST", "the local socket")
        raise ImageBuildError(
            f"cannot reach a Docker daemon at {where} ({exc}). Start one (scripts/docker-setup.sh) "
            "or point DOCKER_HOST at a daemon."
        ) from exc
    return client


def image_exists(client: DockerClient, name: str) -> bool:
    import docker

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


@contextlib.contextmanager
def build_lock(name: str) -> Iterator[None]:
    """One build of ``name`` at a time across threads and processes (parallel episodes build it once).

    The lock file is removed when the build is done. A waiter may then hold the lock of a file no longer
    there while a newcomer locks a new one, so the lock counts only once its file is still the one at the path.
    """
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    path = LOCK_DIR / f"pacore-swe-image-{digest}.lock"
    while True:
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if _same_file(handle, path):
                    try:
                        yield
                    finally:
                        path.unlink(missing_ok=True)  # before unlocking: waiters on it see it gone and retry
                    return
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _same_file(handle: IO[str], path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------------------------------------- base


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (the one reachable here), else deb.debian.org."""
    if os.environ.get("PACORE_DEBIAN_MIRROR"):
        return os.environ["PACORE_DEBIAN_MIRROR"]
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            urls = [w for w in words if w.startswith(("http://", "https://"))]
            for url in urls:
                if "debian" in url and "security" not in url and not line.lstrip().startswith("#"):
                    return url.rstrip("/")
    return "http://deb.debian.org/debian"


def base_image_name(release: str, kind: str = "base") -> str:
    return f"pacore-swe.{kind}:{release}"


def base_recipe(release: str, *, builder: bool = False) -> str:
    """The hash of what the ``release`` base is made of (its label), known without Docker."""
    packages = BUILDER_PACKAGES if builder else BASE_PACKAGES
    return hashlib.sha256(f"{release} {' '.join(packages)}".encode()).hexdigest()[:16]


def ensure_base_image(
    client: DockerClient | None = None,
    *,
    release: str = BASE_RELEASE,
    builder: bool = False,
    log: Log = print,
    rebuild: bool = False,
) -> str:
    """Build the Debian ``release`` base image once (about 2 minutes): debootstrap, then import the tree.

    ``builder``: the base plus a C compiler and Python's headers, for packages that exist only as source.
    The image carries a hash of its recipe; an image of the same name made from another recipe is rebuilt.
    """
    client = client or docker_client()
    name = base_image_name(release, "builder" if builder else "base")
    packages = BUILDER_PACKAGES if builder else BASE_PACKAGES
    recipe = base_recipe(release, builder=builder)
    with build_lock(name):
        if image_label(client, name, BASE_RECIPE_LABEL) == recipe and not rebuild:
            return name
        if shutil.which("debootstrap") is None:
            raise ImageBuildError(
                f"image {name} is missing and debootstrap is not installed: run scripts/docker-setup.sh"
            )
        if os.geteuid() != 0:
            raise ImageBuildError(f"building {name} needs root (debootstrap): run it once as root")
        mirror = debian_mirror()
        log(f"building {name} with debootstrap from {mirror} (about 2 minutes, once)")
        with tempfile.TemporaryDirectory(prefix="pacore-rootfs-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            command = [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                release,
                str(rootfs),
                mirror,
            ]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise ImageBuildError(
                    f"debootstrap {release} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for entry in (rootfs / junk).glob("*"):
                    if entry.is_file():
                        entry.unlink()
            archive = Path(tmp) / "rootfs.tar"
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], check=True)
            repository, tag = name.split(":")
            changes = [
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV LANG=C.UTF-8",
                f"LABEL {BASE_RECIPE_LABEL}={recipe}",
                'CMD ["/bin/bash"]',
            ]
            client.api.import_image_from_file(str(archive), repository=repository, tag=tag, changes=changes)
        if image_label(client, name, BASE_RECIPE_LABEL) != recipe:
            raise ImageBuildError(f"docker import did not produce {name}")
        log(f"built {name}")
        return name


def image_label(client: DockerClient, image: str, label: str) -> str | None:
    """A label of a local image; None when the image or the label is missing."""
    import docker

    try:
        return (client.images.get(image).labels or {}).get(label)
    except docker.errors.ImageNotFound:
        return None


def build_image(client: DockerClient, context: Path, tag: str, labels: dict[str, str]) -> None:
    """``docker build`` of a folder holding a Dockerfile, without network; the build log is in the error."""
    from pacore_agents.swe.docker_files import write_tar

    with tempfile.TemporaryFile() as archive:
        write_tar(archive, {".": context})
        archive.seek(0)
        lines: list[str] = []
        try:
            for event in client.api.build(
                fileobj=archive,
                custom_context=True,
                tag=tag,
                labels=labels,
                network_mode="none",
                rm=True,
                forcerm=True,
                decode=True,
            ):
                if "stream" in event:
                    lines.append(event["stream"])
                if "error" in event:
                    raise ImageBuildError(f"building {tag} failed: {event['error'].strip()}\n{''.join(lines)[-4000:]}")
        except ImageBuildError:
            raise
        except Exception as exc:  # the daemon refused or went away
            raise ImageBuildError(f"building {tag} failed: {exc}") from exc


# ---------------------------------------------------------------------------------------------- tasks


def repo_files(repo_dir: Path) -> list[Path]:
    """The task repository's files, relative, sorted; caches and VCS folders left out."""
    files = []
    for path in sorted(repo_dir.rglob("*")):
        relative = path.relative_to(repo_dir)
        if path.is_file() and not (set(relative.parts) & _IGNORED_PARTS) and path.suffix != ".pyc":
            files.append(relative)
    return files


def task_hash(repo_dir: Path, parent: str) -> str:
    """What the task image is made of: its Dockerfile, its files, and ``parent``, the recipe of the image it is
    built on (a base rebuilt by a newer pacore rebuilds the task images on it)."""
    digest = hashlib.sha256(_dockerfile().encode() + b"\0" + parent.encode())
    for relative in repo_files(repo_dir):
        digest.update(str(relative).encode() + b"\0" + (repo_dir / relative).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def commit_repo(directory: Path) -> str:
    """`git init` + one reproducible commit of everything in ``directory``; returns the hash."""
    env = {**os.environ, **GIT_ENV}

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=directory, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageBuildError(f"git {' '.join(args)} failed in {directory}: {done.stderr.strip()}")
        return done.stdout.strip()

    git("init", "-q")
    (directory / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (directory / ".git" / "info" / "exclude").write_text("".join(f"{rule}\n" for rule in GIT_EXCLUDES))
    git("add", "-A")
    git("-c", "commit.gpgsign=false", "commit", "-q", "-m", "base")
    return git("rev-parse", "HEAD")


def copy_repo(repo_dir: Path, destination: Path) -> None:
    """Copy the repository with normalised modes (0644 files), as the image receives it."""
    for relative in repo_files(repo_dir):
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((repo_dir / relative).read_bytes())
        target.chmod(0o644)


def compute_base_commit(repo_dir: Path) -> str:
    """The commit hash the task image will have, computed on the host with the same recipe."""
    with tempfile.TemporaryDirectory(prefix="pacore-commit-") as tmp:
        copy_repo(repo_dir, Path(tmp))
        return commit_repo(Path(tmp))


def _dockerfile() -> str:
    env = " ".join(f'{key}="{value}"' for key, value in GIT_ENV.items())
    excludes = "\\n".join(GIT_EXCLUDES)
    return (
        f"FROM {TASK_BASE_IMAGE}\n"
        "ENV PYTHONDONTWRITEBYTECODE=1\n"
        f"COPY repo {CONTAINER_WORKDIR}\n"
        f"WORKDIR {CONTAINER_WORKDIR}\n"
        f"RUN export {env} && git init -q && mkdir -p .git/info && printf '{excludes}\\n' > .git/info/exclude"
        " && git add -A && git -c commit.gpgsign=false commit -q -m base"
        " && git config --global --add safe.directory '*'\n"
    )


def ensure_task_image(
    row: dict[str, Any], client: DockerClient | None = None, *, log: Log = print, rebuild: bool = False
) -> str:
    """Build the row's image from its task folder (``pacore_task_dir``) unless an up-to-date one exists."""
    image: str = row["image"]
    task_dir = row.get("pacore_task_dir")
    if not task_dir:
        raise ImageBuildError(f"row {row.get('instance_id')!r} has no task folder to build {image!r} from")
    repo_dir = Path(task_dir) / "repo"
    client = client or docker_client()
    from pacore_agents.swe.rex_images import ensure_rex_image, rex_recipe

    wanted = task_hash(repo_dir, rex_recipe(BASE_RELEASE))
    if not rebuild and image_label(client, image, TASK_HASH_LABEL) == wanted:
        return image
    ensure_rex_image(client, release=BASE_RELEASE, log=log)
    with build_lock(image):
        if not rebuild and image_label(client, image, TASK_HASH_LABEL) == wanted:
            return image
        log(f"building {image}")
        with tempfile.TemporaryDirectory(prefix="pacore-task-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(_dockerfile())
            copy_repo(repo_dir, Path(tmp) / "repo")
            build_image(client, Path(tmp), image, {TASK_HASH_LABEL: wanted})
    head = _image_head(client, image)
    if head != row["base_commit"]:
        raise ImageBuildError(
            f"{image}: the repository commits to {head}, but the row says base_commit {row['base_commit']}"
            " (task files changed without updating task.json?)"
        )
    return image


def _image_head(client: DockerClient, image: str) -> str:
    output: bytes = client.containers.run(
        image, ["git", "rev-parse", "HEAD"], network_mode="none", remove=True, working_dir=CONTAINER_WORKDIR
    )
    return output.decode().strip()


def ensure_images(rows: list[dict[str, Any]], client: DockerClient | None = None, *, log: Log = print) -> None:
    """Build every buildable row's image (local tasks); rows from SWE-bench are left to their registry."""
    client = client or docker_client()
    for row in rows:
        if row.get("pacore_task_dir"):
            ensure_task_image(row, client, log=log)
