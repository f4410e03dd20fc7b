"""``pacore view`` started as a user starts it, for the viewer's tests (a module of its own: test modules import
it, and a ``conftest`` is no module to import from, there being one per test folder)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from viewer_folders import ROOT


@contextmanager
def served(folder: Path, *extra: str) -> Iterator[str]:
    """``pacore view FOLDER`` in a process of its own, as a user starts it; yields the URL it prints, and stops it
    (Ctrl-C) when the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pacore_graph.cli", "view", str(folder), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = process.stdout.readline().strip() if process.stdout else ""
        assert url.startswith("http://127.0.0.1:"), f"pacore view printed no URL: {process.communicate()[1]}"
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    assert process.returncode == 0, f"pacore view ended with {process.returncode}"
