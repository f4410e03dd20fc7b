"""What LangGraph's Postgres savers store, read from their own tables (``checkpoints``, ``checkpoint_blobs``,
``checkpoint_writes``): bytes and rows per thread, so tests can hold PaCoRe's storage to a bound."""

from __future__ import annotations

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
    """A running test server: its URL without a database, and its data folder."""

    url: str
    data: Path


def breakdown(url: str) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(rows, bytes) per (table, thread, namespace)."""
    found: dict[tuple[str, str, str], tuple[int, int]] = {}
    with psycopg.connect(url) as db:
        for table, size in TABLES.items():
            query = f"SELECT thread_id, checkpoint_ns, COUNT(*), COALESCE(SUM({size}), 0) FROM {table} GROUP BY 1, 2"
            for thread, namespace, rows, stored in db.execute(query):
                found[(table, thread, namespace)] = (rows, int(stored))
    return found


def stored_bytes(url: str, thread_id: str | None = None) -> int:
    """Bytes the saver holds, for one thread or for all."""
    return sum(stored for (_, thread, _), (_, stored) in breakdown(url).items() if thread_id in (None, thread))


def thread_ids(url: str) -> set[str]:
    """Every thread that has a row in any of the saver's tables."""
    return {thread for (_, thread, _) in breakdown(url)}
