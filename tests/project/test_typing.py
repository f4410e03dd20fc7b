"""The public API's types hold for a user's code: mypy (strict, the project's [tool.mypy]) accepts what a user
writes (tests/typing/accepted.py) and rejects each mistake of tests/typing/rejected.py with the expected error.

Runs the real mypy of the dev extra in a subprocess, with a cache of its own under tmp_path.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TYPING = ROOT / "tests" / "typing"
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$")
EXPECT = re.compile(r"#\s*expect:\s*(?P<code>[a-z0-9-]+)\s*$")


def expected_errors(path: Path) -> set[tuple[int, str]]:
    return {
        (number, found["code"])
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if (found := EXPECT.search(line))
    }


def test_mypy_accepts_what_users_write_and_rejects_each_mistake(tmp_path):
    accepted, rejected = TYPING / "accepted.py", TYPING / "rejected.py"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--show-absolute-path",
            "--no-error-summary",
            str(accepted),
            str(rejected),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr or done.stdout  # 2: mypy itself failed (config, crash)
    errors: dict[str, set[tuple[int, str]]] = {}
    for line in done.stdout.splitlines():
        if (found := ERROR.match(line)) is not None:
            errors.setdefault(found["path"], set()).add((int(found["line"]), found["code"] or "?"))
    assert set(errors) <= {str(accepted), str(rejected)}, done.stdout  # the library itself type-checks
    assert str(accepted) not in errors, done.stdout
    want = expected_errors(rejected)
    assert len(want) >= 25  # the file's expectations were read
    got = errors.get(str(rejected), set())
    assert sorted(want - got) == [], f"mistakes mypy let through:\n{done.stdout}"
    assert sorted(got - want) == [], f"errors on lines that expect none:\n{done.stdout}"
