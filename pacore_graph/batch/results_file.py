"""Files a run writes that survive SIGKILL: append-only JSONL results, and JSON files replaced whole.

Each row is written as one complete line (written on from where a short write stopped) and ``fsync``ed, under
a lock. A kill can still tear that line: Linux stops a write to a file between pages once the writer has a
fatal signal (SIGKILL) pending, so the file may end in part of the row being written. On load, such a torn
last line (or one left by a full disk: the last line, undecodable, without its newline) is cut off the end of
the file and reported, never fatal: a kill loses at most the row it interrupted, which the writer had not
finished. Nothing else is ever changed in a file: a line that cannot be read anywhere else, or a row the key
cannot be read from, means the file is not what this run wrote, and loading it is refused
(:class:`ResultsFileError`) with the file untouched.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pacore_graph.errors import PaCoReError

RESULTS_FILE = "results.jsonl"  # a run folder's own results file (other files of a folder use this format too)


class ResultsFileError(PaCoReError):
    """A results file holds a line that no finished or torn write of this project explains; it is left as it is."""

    def __init__(self, path: Path, line: int, why: str):
        self.path = path
        self.line = line
        super().__init__(
            f"{path} line {line} {why}: no row this run writes; the file was left as it is. If that line is the "
            f"only damage, drop it and run again: sed -i '{line}d' {shlex.quote(str(path))}"
        )


@dataclass(frozen=True)
class RowLine:
    """One line of a results file: where it lies (``offset``, ``size`` in bytes) and its row, or None for a last
    line torn mid-write; ``unfinished``: it lacks its newline (only the last line can)."""

    number: int
    offset: int
    size: int
    row: Any
    unfinished: bool


def read_lines(
    path: str | os.PathLike[str], loads: Callable[[bytes], Any] = json.loads, *, start: int = 0, first_line: int = 1
) -> Iterator[RowLine]:
    """The rows of a results file in order, blank lines skipped, reading only. A last line that is no JSON and
    lacks its newline (a row being written, or torn by a kill) comes as ``row=None`` and ends the file; any
    other line that is no JSON is :class:`ResultsFileError`. ``loads``: a faster parser (it must raise
    ``ValueError`` on what it cannot read; the line is then read again with ``json.loads``). ``start``: the
    offset of a line to read on from (a reader following a growing file), ``first_line`` its number."""
    path = Path(path)
    offset = start
    with path.open("rb") as fh:
        fh.seek(start)
        for number, raw in enumerate(fh, first_line):
            unfinished = not raw.endswith(b"\n")
            if raw.strip():
                try:
                    try:
                        row = loads(raw)
                    except ValueError:
                        if loads is json.loads:
                            raise
                        row = json.loads(raw)  # what json.dumps writes and a faster parser refuses (NaN)
                except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                    if unfinished:
                        yield RowLine(number, offset, len(raw), None, True)
                        return
                    raise ResultsFileError(path, number, f"is not JSON ({_reason(exc)})") from None
                yield RowLine(number, offset, len(raw), row, unfinished)
            offset += len(raw)


class ResultsFile:
    """One JSONL file of result rows, keyed for resume by ``key(row)``."""

    def __init__(self, path: str | os.PathLike[str], key: Callable[[dict[str, Any]], Any], *, repair: bool = True):
        """``repair``: cut a torn last line off the file (the owner of the folder); False leaves the file as it is
        and skips that line (a reader beside a run, whose last line may be in the middle of being written)."""
        self.path = Path(path)
        self.key = key
        self.repair = repair
        self._lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.torn_lines = 0
        self._needs_newline = False  # the last row is whole but lost its newline: the next append adds it
        self._keys: set[Any] = set()
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        for line in read_lines(self.path):
            if line.row is None:  # torn by a kill or a full disk mid-write: cut off, the next row starts clean
                if self.repair:
                    self._cut_at(line.offset, line.offset + line.size)
                self.torn_lines = 1
                break
            self._keys.add(self._key_of(line.row, line.number))
            self.rows.append(line.row)
            self._needs_newline = line.unfinished

    def _key_of(self, row: Any, number: int) -> Any:
        try:
            if not isinstance(row, dict):
                raise TypeError(f"a JSON {type(row).__name__}, not an object")
            key = self.key(row)
            hash(key)
            return key
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise ResultsFileError(self.path, number, f"is not a row of this run ({_reason(exc)})") from None

    def _cut_at(self, offset: int, size: int) -> None:
        """Drop the bytes from ``offset`` on, if the file still has the size it was read with."""
        fd = os.open(self.path, os.O_WRONLY)
        try:
            if os.fstat(fd).st_size == size:
                os.ftruncate(fd, offset)
                os.fsync(fd)
        finally:
            os.close(fd)

    def done(self) -> set[Any]:
        """Keys of rows already written."""
        return set(self._keys)

    def append(self, row: dict[str, Any]) -> None:
        """Write one row as a whole line and fsync it; a second row with a key already present is refused."""
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            if self.key(row) in self._keys:
                raise ValueError(f"duplicate result for key {self.key(row)!r} in {self.path}")
            if self._needs_newline:
                line = b"\n" + line
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                rest = memoryview(line)
                while rest:  # a write may take part of the line (a full disk): the rest follows, or it raises
                    rest = rest[os.write(fd, rest) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._needs_newline = False
            self.rows.append(row)
            self._keys.add(self.key(row))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        text = f"{exc.msg} at column {exc.colno}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 80 else f"{text[:77]}..."


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
