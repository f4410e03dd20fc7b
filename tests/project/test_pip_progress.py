"""``scripts/pip_progress.py``, which ``make demo`` and ``make test`` run pip through: a short account of pip's
verbose output while it runs, the whole output in a log, and the log's tail when pip fails. The real pip runs
through it in every fresh ``make`` (CI's included); here a stand-in prints pip's kinds of lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pip_progress.py"

PIP_LIKE = """
import sys
print("Using pip 25.3 from /x/pip (python 3.11)")
print("Collecting llama-cpp-python==0.3.36 (from -c constraints.txt (line 108))")
print("  Building wheel for llama-cpp-python (pyproject.toml): started")
for step in range(1, 5):
    print(f"  [{step}/4] /usr/bin/c++ -O3 -c very/long/compiler/command/{step}.cpp")
print("Successfully installed a-1 b-2 llama-cpp-python-0.3.36")
print("the last line of a failure", flush=True)
sys.exit(int(sys.argv[1]))
"""


def run(tmp_path: Path, exit_code: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), str(tmp_path / "pip.log"), sys.executable, "-c", PIP_LIKE, str(exit_code)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_it_prints_a_short_account_and_keeps_the_whole_output_in_its_log(tmp_path):
    done = run(tmp_path, 0)
    assert done.returncode == 0 and done.stderr == ""
    said = [line.split("] ", 1)[1] for line in done.stdout.splitlines()]
    assert said == [
        "collecting llama-cpp-python==0.3.36 (1 so far)",
        "building llama-cpp-python from source",
        "compiling: step 1 of 4",
        "compiling: step 4 of 4",
        "installed 3 packages",
    ]
    log = (tmp_path / "pip.log").read_text()
    assert "very/long/compiler/command/3.cpp" in log  # every line of pip's, kept


def test_a_failing_pip_shows_the_logs_tail_and_where_the_log_is(tmp_path):
    done = run(tmp_path, 3)
    assert done.returncode == 3
    assert "the last line of a failure" in done.stderr
    assert done.stderr.rstrip().endswith(f"pip failed (exit 3); its whole output: {tmp_path / 'pip.log'}")
