"""The README's Python snippets run as a reader pastes them: each in a fresh interpreter, in an empty folder, on
the embedded model (no server URL), in the order the README shows them. The graph, agent and endpoint
snippets have their own tests of the same code paths (test_embedded.py, test_examples_langchain.py,
test_server_clients.py); these are the two a newcomer meets first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.embedded

README = Path(__file__).resolve().parents[2] / "README.md"


def snippet(first_line: str) -> str:
    """The README's Python block that starts with ``first_line``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    return next(block for block in blocks if block.startswith(first_line))


def paste(code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "OPENAI_BASE_URL"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_quickstart_prints_the_answer_and_its_rounds(tmp_path):
    done = paste(snippet("from pacore_graph import PaCoReConfig, chat_model, solve"), tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.rstrip("\n").splitlines()
    assert lines[0].strip()  # the answer (a 135M model's: anything)
    assert re.fullmatch(r"round 1: K=4, [\d,]+ tokens.*", lines[-3]) and lines[-2].startswith("round 2: K=1, ")
    assert re.fullmatch(r"effective TTC: [\d,]+ completion tokens over 5 calls", lines[-1])


def test_the_run_folder_snippet_prints_answers_and_continues_when_run_again(tmp_path):
    code = snippet("import asyncio")
    first = paste(code, tmp_path)
    assert first.returncode == 0, first.stderr
    answers = [line for line in first.stdout.splitlines() if " -> " in line]
    assert sorted(line.split(" -> ")[0] for line in answers) == ["q1", "q2"]
    assert "fresh=2" in first.stdout
    again = paste(code, tmp_path)
    assert again.returncode == 0 and "skipped=2" in again.stdout and "fresh=0" in again.stdout
