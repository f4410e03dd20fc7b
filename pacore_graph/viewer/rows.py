"""A results file as the viewer reads it: once through, keeping only where each row lies, then one row at a
time as a problem is opened. The folder is never copied and never written to; a run beside the viewer may
go on appending, and a later look at the index reads the new rows only.

A last line without its newline that is no JSON yet is a row being written: it is skipped (and read once it is
whole), as ``pacore show`` skips it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from pacore_graph.batch.results_file import read_lines

Json = dict[str, Any]  # a row, an index or a problem's data: plain JSON


def loads(raw: bytes) -> Any:
    """orjson's parser (several times the standard library's speed on a big results file), else the standard
    library's, which also reads what ``json.dumps`` writes and orjson refuses (``NaN``)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class RowIndex:
    """Where each row of one results file lies, by its key; ``on_row`` sees every row once as it is found."""

    def __init__(
        self,
        path: Path,
        key: Callable[[Json], str],
        on_row: Callable[[str, Json], None],
        on_reset: Callable[[], None] | None = None,
    ):
        """``on_reset``: forget what ``on_row`` saw, when the file is read again from its start."""
        self.path = path
        self.key = key
        self.on_row = on_row
        self.on_reset = on_reset
        self.places: dict[str, tuple[int, int]] = {}
        self.order: list[str] = []
        self.being_written = False  # the last look found a row being written
        self._end = 0  # offset after the last whole line read
        self._lines = 0
        self._size = -1
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Read the rows appended since the last look; True when some were found. A file that shrank (the run
        cut a torn last line off it) is read again from its start."""
        with self._lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size == self._size:
                return False
            if size < self._end:
                self.places.clear()
                self.order.clear()
                self._end = self._lines = 0
                if self.on_reset is not None:
                    self.on_reset()
            self._size = size
            if not size:
                return False
            found = False
            self.being_written = False
            for line in read_lines(self.path, loads, start=self._end, first_line=self._lines + 1):
                if line.row is None:
                    self.being_written = True
                    break
                key = str(self.key(line.row))
                if key not in self.places:
                    self.order.append(key)
                self.places[key] = (line.offset, line.size)
                self._end = line.offset + line.size
                self._lines = line.number
                self.on_row(key, line.row)
                found = True
            return found

    def row(self, key: str) -> Json | None:
        """The row of ``key``, read from the file now; None for a key the index has not seen."""
        place = self.places.get(key)
        if place is None:
            return None
        offset, size = place
        with self.path.open("rb") as handle:
            handle.seek(offset)
            row: Json = loads(handle.read(size))
        return row
