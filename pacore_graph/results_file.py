"""Files a run writes that survive SIGKILL: append-only JSONL results, and JSON files replaced whole.

Each row is written as one complete line (written on from where a short write stopped) and ``fsync``ed, under
a lock. A kill can still tear that line: Linux stops a write to a file between pages once the writer has a
fatal signal (SIGKILL) pending, so the file may end in part of the row being written. On load, such a torn
trailing line (or one left by a full disk) is dropped and reported, never fatal, and the file rewritten
without it: a kill loses at most the row it interrupted, which the writer had not finished.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


class ResultsFile:
    """One JSONL file of result rows, keyed for resume by ``key(row)``."""

    def __init__(self, path: str | os.PathLike[str], key: Callable[[dict[str, Any]], Any]):
        self.path = Path(path)
        self.key = key
        self._lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.torn_lines = 0
        if self.path.exists():
            self._load()
        self._keys = {key(row) for row in self.rows}

    def _load(self) -> None:
        with self.path.open("rb") as fh:
            for raw in fh:
                line = raw.strip()
                if not line:
                    continue
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:
                    self.torn_lines += 1
        if self.torn_lines:
            # Rewrite without the torn line so the next append starts on a clean line.
            self._rewrite(self.rows)

    def _rewrite(self, rows: Iterable[dict[str, Any]]) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def done(self) -> set[Any]:
        """Keys of rows already written."""
        return set(self._keys)

    def append(self, row: dict[str, Any]) -> None:
        """Write one row as a whole line and fsync it; a second row with a key already present is refused."""
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            if self.key(row) in self._keys:
                raise ValueError(f"duplicate result for key {self.key(row)!r} in {self.path}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                rest = memoryview(line)
                while rest:  # a write may take part of the line (a full disk): the rest follows, or it raises
                    rest = rest[os.write(fd, rest):]
                os.fsync(fd)
            finally:
                os.close(fd)
            self.rows.append(row)
            self._keys.add(self.key(row))


def write_json_atomically(path: str | os.PathLike[str], data: Any) -> None:
    """Write to a temporary file, fsync, rename: a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, ensure_ascii=False, default=str)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
