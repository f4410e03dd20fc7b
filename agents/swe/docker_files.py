"""Files into and out of containers and build contexts, as tar streams (the Docker API's only way)."""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from docker.models.containers import Container  # docker-py ships no types: Any to the checker


def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def write_tar(fileobj: IO[bytes], folders: dict[str, Path]) -> None:
    """A tar of each folder under its name, modes and symlinks kept, owned by root."""
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for name, folder in folders.items():
            tar.add(folder, arcname=name, filter=root_owned)


def put_file(container: Container, path: str, data: bytes, mode: int = 0o644) -> bool:
    """Write one file into a container (its folder must exist); False if the daemon refused."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(posixpath.basename(path))
        info.size, info.mode = len(data), mode
        archive.addfile(info, io.BytesIO(data))
    return bool(container.put_archive(posixpath.dirname(path) or "/", buffer.getvalue()))


def read_file(container: Container, path: str) -> bytes:
    """The bytes of one regular file in a container, whatever its size."""
    stream, _ = container.get_archive(path)
    buffer = io.BytesIO()
    for chunk in stream:
        buffer.write(chunk)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as archive:
        member = archive.next()
        handle = archive.extractfile(member) if member is not None else None
        if handle is None:
            raise FileNotFoundError(f"{path} is not a regular file in the container")
        return handle.read()


def read_folder(container: Container, path: str) -> dict[str, bytes]:
    """The regular files directly in a container's folder, by name (the container may have stopped)."""
    stream, _ = container.get_archive(path)
    buffer = io.BytesIO()
    for chunk in stream:
        buffer.write(chunk)
    buffer.seek(0)
    files = {}
    with tarfile.open(fileobj=buffer) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.name.count("/") == 1 else None
            if handle is not None:  # a regular file (links and folders have no content)
                files[posixpath.basename(member.name)] = handle.read()
    return files
