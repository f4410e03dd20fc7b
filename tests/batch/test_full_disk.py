"""A full disk under ``pacore solve --output``: one error line, no traceback, nothing torn, and the same command
goes on once there is space again. The disk is a real 1 MiB tmpfs (mounting it needs root, as make test does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONCLUSION = "The answer is 4, since 2 + 2 = 4. " * 30


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    assert mounted.returncode == 0, f"cannot mount a tmpfs (root needed, as for make test): {mounted.stderr}"
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` up to ``leave`` bytes free."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.parametrize("leave", [0, 16_000, 64_000])
def test_a_full_disk_is_one_line_and_the_same_command_goes_on_after(mock_server, small_disk, leave):
    out = small_disk / "run"
    with mock_server(lambda body, attempt: {"content": CONCLUSION, "reasoning_content": "thinking " * 100}) as server:
        command = [
            sys.executable,
            "-m",
            "pacore_graph.cli",
            "solve",
            "What is 2+2?",
            "--base-url",
            server.base_url,
            "--model",
            "mock-model",
            "--rounds",
            "8,2",
            "--output",
            str(out),
        ]
        filler = fill(small_disk, leave)
        full = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        filler.unlink()
        again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert full.returncode == 1, full.stderr[-2000:]
    (line,) = [line for line in full.stderr.splitlines() if line.startswith("pacore: error:")]
    assert line.startswith(f"pacore: error: the disk holding {out} is full") and "Traceback" not in full.stderr
    assert again.returncode == 0, again.stderr[-2000:]
    rows = [json.loads(row) for row in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["answer"].startswith("The answer is 4")
