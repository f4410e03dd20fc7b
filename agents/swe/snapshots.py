"""A row's repository at its base commit, from a folder of snapshots or clones (``--repos DIR``).

``DIR`` may hold, for a row ``ID`` of repository ``owner/name``, the first of:

* ``ID.tar.gz`` (or ``.tgz`` / ``.tar``): ``git archive`` of the base commit, with or without one
  leading folder (``git archive --prefix=ID/``, as ``../shared/data/swebench/repos`` has them);
* ``ID/``: a git clone (any checkout: the base commit is read from its history) or a plain tree;
* ``owner__name/``: a git clone of the public repository that contains the base commit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


class SnapshotError(ValueError):
    """No usable snapshot of a row's repository; the message says where it looked."""


def find_snapshot(repos: Path, row: dict[str, Any]) -> Path:
    """The archive or folder in ``repos`` that holds the row's repository."""
    instance_id: str = row["instance_id"]
    repo: str = row["repo"]
    archives = [repos / f"{instance_id}{suffix}" for suffix in ARCHIVE_SUFFIXES]
    folder, clone = repos / instance_id, repos / repo.replace("/", "__")
    for candidate in archives:
        if candidate.is_file():
            return candidate
    if folder.is_dir():
        return folder
    if _is_git(clone):
        return clone
    raise SnapshotError(
        f"{instance_id}: no snapshot in {repos} (looked for {archives[0].name}, {folder.name}/, {clone.name}/)"
    )


def extract_snapshot(source: Path, row: dict[str, Any], target: Path) -> None:
    """Write the repository tree at the row's base commit into the empty folder ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        _extract_archive(source, target)
    elif _is_git(source):
        _archive_commit(source, row["base_commit"], target)
    else:
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    if not any(target.iterdir()):
        raise SnapshotError(f"{row['instance_id']}: the snapshot {source} is empty")


def _is_git(folder: Path) -> bool:
    return (folder / ".git").exists()


def _extract_archive(archive: Path, target: Path) -> None:
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            tops = {member.name.split("/", 1)[0] for member in members}
            prefix = next(iter(tops)) if len(tops) == 1 and any(m.name.count("/") for m in members) else ""
            for member in members:
                if prefix:
                    member.name = member.name[len(prefix) + 1 :] if member.name != prefix else "."
            tar.extractall(target, members=[m for m in members if m.name not in ("", ".")], filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise SnapshotError(f"{archive}: not a readable tar archive ({exc})") from exc


def _archive_commit(clone: Path, commit: str, target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pacore-archive-") as tmp:
        archive = Path(tmp) / "tree.tar"
        done = subprocess.run(
            ["git", "-C", str(clone), "archive", "--format=tar", "-o", str(archive), commit],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SnapshotError(f"{clone}: cannot read commit {commit} ({done.stderr.strip()}); fetch it first")
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")


def tree_digest(root: Path) -> str:
    """A content hash of a tree (paths, modes, file bytes, link targets): what the image is built from."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L {relative} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {relative} {path.stat().st_mode & 0o111:o}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]
