"""Paths inside the viewed folder, and nothing outside it: ``../``, absolute paths and symlinks that lead out
are refused. Every file the viewer reads or serves goes through :func:`inside`."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath


class OutsideFolder(ValueError):
    """A path that would leave the viewed folder (or names nothing in it)."""


def inside(root: Path, relative: str) -> Path:
    """``root / relative``, resolved, when it is a path within ``root`` (symlinks followed); else OutsideFolder.

    ``root`` is the folder as resolved when the viewer opened it. Only plain relative POSIX paths are taken:
    no ``..`` part, no leading ``/``, no backslash, no NUL."""
    if not relative or "\x00" in relative or "\\" in relative or relative.startswith("/"):
        raise OutsideFolder(f"not a path inside the folder: {relative!r}")
    parts = PurePosixPath(relative).parts
    if any(part in ("..", ".") for part in parts) or re.match(r"^[A-Za-z]:", relative):
        raise OutsideFolder(f"not a path inside the folder: {relative!r}")
    resolved = (root / Path(*parts)).resolve()
    if not resolved.is_relative_to(root):  # a symlink that leads out
        raise OutsideFolder(f"{relative!r} leads outside the folder")
    return resolved


# The SWE agent's file names for instance ids, model names and run ids (pacore_agents' output_paths.folder_name,
# which the library may not import): a plain name as it is, any other its safe characters plus a hash.
_PLAIN = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def folder_name(text: str) -> str:
    """The name the SWE agent gives ``text``'s file or folder (``trajectories/NAME.json``, eval log folders)."""
    import hashlib

    if _PLAIN.fullmatch(text):
        return text
    readable = _UNSAFE.sub("_", text.lower()).strip("._-")[:60]
    return f"{readable}+{hashlib.sha256(text.encode()).hexdigest()[:16]}"
