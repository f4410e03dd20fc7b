"""An exclusive lock on an output folder, so that two runs never write into one folder at once.

Why: two runs of the same benchmark into one folder would both do all the work and append conflicting
rows for the same keys. The lock is ``flock`` on ``FOLDER/.lock``: the kernel drops it when its process
ends however it ends (SIGKILL included), so a crashed run never leaves a folder locked. The file keeps
the pid of its last holder, which is what a refused run names. It is never deleted: deleting it would
let a run that opened the old file and a run that made a new one both believe they hold the lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from pacore_graph.errors import PaCoReError

LOCK_FILE = ".lock"


class FolderInUse(PaCoReError):
    """Another live process holds the folder's lock; ``pid`` is its process id (None if it could not be read)."""

    def __init__(self, folder: Path, pid: int | None):
        self.folder = folder
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"{folder} is in use by another run ({holder}): wait for it to end or choose another output folder"
        )


class FolderLock:
    """Held from :meth:`acquire` to :meth:`release` (or the end of the process)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock at once or raise :class:`FolderInUse`; the folder must exist."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderInUse(self.folder, _holder(self.path)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None  # the holder has not written its pid yet
