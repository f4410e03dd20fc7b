"""What LangGraph's Postgres savers store, read from their own tables (``checkpoints``, ``checkpoint_blobs``,
``checkpoint_writes``): bytes and rows per thread, so tests can hold PaCoRe's storage to a bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

# bytes of each table's rows: the checkpoint documents as stored text, the blobs and the writes as stored
TABLES = {
    "checkpoints": "octet_length(checkpoint::text) + octet_length(metadata::text)",
    "checkpoint_blobs": "coalesce(octet_length(blob), 0)",
    "checkpoint_writes": "coalesce(octet_length(blob), 0)",
}


@dataclass(frozen=True)
class PostgresServer:
    """A running test server: its URL without a database, its data folder, and the database it made (``pacore``)
    for tests that need no database of their own."""

    url: str
    data: Path
    database: str = "pacore"

    @property
    def database_url(self) -> str:
        return f"{self.url}/{self.database}"


def breakdown(url: str) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(rows, bytes) per (table, thread, namespace): where a thread's bytes are, the root graph's (namespace
    ``""``) apart from its subgraphs'."""
    found: dict[tuple[str, str, str], tuple[int, int]] = {}
    with psycopg.connect(url) as db:
        for table, size in TABLES.items():
            query = f"SELECT thread_id, checkpoint_ns, COUNT(*), COALESCE(SUM({size}), 0) FROM {table} GROUP BY 1, 2"
            for thread, namespace, rows, stored in db.execute(query):
                found[(table, thread, namespace)] = (rows, int(stored))
    return found


def stored_bytes(
    url: str, thread_id: str | None = None, namespace_filter: str | Callable[[str], bool] | None = None
) -> int:
    """Bytes the saver holds, for one thread or for all; ``namespace_filter`` keeps one checkpoint namespace
    (a string, ``""`` for the root graph) or those a predicate accepts (subgraphs: ``lambda ns: ns != ""``)."""
    if isinstance(namespace_filter, str):
        wanted = namespace_filter
        namespace_filter = lambda namespace: namespace == wanted  # noqa: E731
    return sum(
        stored
        for (_, thread, namespace), (_, stored) in breakdown(url).items()
        if thread_id in (None, thread) and (namespace_filter is None or namespace_filter(namespace))
    )


def thread_ids(url: str) -> set[str]:
    """Every thread that has a row in any of the saver's tables."""
    return {thread for (_, thread, _) in breakdown(url)}
