"""File names made from untrusted text (instance ids, model names, run ids), confined to an output folder.

A name made only of lower-case letters, digits, ``.``, ``_`` and ``-`` (starting with a letter or a
digit, at most 100 characters) is used as it is, so SWE-bench's ids and swebench's log layout stay
recognisable. Any other text becomes its safe characters plus ``+`` and a hash of the whole text:
``+`` never occurs in a name used as it is, so two different texts never share a name (on
case-insensitive file systems too), and ``..``, ``/x`` or a 300-character id cannot leave the folder.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_PLAIN = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


class OutputPathError(ValueError):
    """A path would leave the output folder."""


def folder_name(text: str) -> str:
    """A file or folder name for ``text`` that is safe, short and distinct for distinct texts."""
    if _PLAIN.fullmatch(text):
        return text
    readable = _UNSAFE.sub("_", text.lower()).strip("._-")[:60]
    return f"{readable}+{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def inside(root: Path, *texts: str) -> Path:
    """``root / folder_name(t1) / folder_name(t2) ...``, checked to lie inside ``root``."""
    path = root.joinpath(*(folder_name(text) for text in texts))
    if not path.resolve().is_relative_to(root.resolve()):  # cannot happen with folder_name; kept as a guard
        raise OutputPathError(f"{path} is outside {root}")
    return path
