"""Debian's PostgreSQL server for the tests of this folder: a throwaway cluster in a temporary folder, started on a
free loopback port for the session and stopped when the folder's tests end; each test gets a database of its own.

A machine without the server fails here with scripts/postgres-setup.sh's one line, which says how to run the rest
of the suite (``make test PG=off``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pg_storage import PostgresServer

from pacore_graph.extend import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.postgres)


def server_bin() -> Path:
    """The server's binaries, from scripts/postgres-setup.sh (which installs Debian's package when missing)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "postgres-setup.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "postgres-setup.sh failed")
    return Path(done.stdout.strip().splitlines()[-1])


def as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as Debian's ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def run_as_server_user(command: list[str], what: str, log: Path | None = None) -> None:
    """Run a server command; a failure fails the test with the command's own words (and the server log's end)."""
    done = subprocess.run(as_server_user(command), capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]
        if log is not None and log.exists():
            said += log.read_text(errors="replace").strip().splitlines()[-10:]
        pytest.fail(f"PostgreSQL: {what} failed ({done.returncode}):\n" + "\n".join(said), pytrace=False)


def server_processes(data: Path) -> list[str]:
    """Process ids of a server running on ``data`` (the postmaster's command line names its data folder)."""
    return subprocess.run(["pgrep", "-f", f"postgres -D {data}( |$)"], capture_output=True, text=True).stdout.split()


@pytest.fixture(scope="package")
def postgres() -> Iterator[PostgresServer]:
    """A fresh cluster (trust authentication, loopback only, fsync off: nothing here must survive a crash) with a
    database ``pacore``; stopped at the end, its folder removed, and no server process of it may be left."""
    binaries = server_bin()
    folder = Path(tempfile.mkdtemp(prefix="pacore-pg-"))
    data, log = folder / "data", folder / "server.log"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    port = free_port()
    options = f"-k {folder} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    pg_ctl = [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log)]
    try:
        run_as_server_user(
            [str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"], "initdb"
        )
        run_as_server_user([*pg_ctl, "-o", options, "-w", "start"], "pg_ctl start", log)
        server = PostgresServer(f"postgresql://postgres@127.0.0.1:{port}", data)
        with psycopg.connect(f"{server.url}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{server.database}"')
        yield server
    finally:
        if server_processes(data):
            run_as_server_user([*pg_ctl, "-m", "fast", "-w", "stop"], "pg_ctl stop", log)
        left = server_processes(data)
        shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"PostgreSQL processes left behind: {left}"


@pytest.fixture
def pg_url(postgres: PostgresServer) -> Iterator[str]:
    """A database of this test's own (dropped after it), as a connection URL."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{postgres.url}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{postgres.url}/{name}"
    finally:
        with psycopg.connect(f"{postgres.url}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
