"""The reference pipeline (stepfun-ai/PaCoRe) as a measured client of ``pacore bench overhead``.

It is not a dependency: ``--reference PATH`` names a checkout of its repository, which is installed into
a scratch venv of its own (as ``scripts/reference_parity.py`` asks you to), with the aiohttp version this
project runs, so both clients use the same HTTP library. The venv is kept under the user's cache folder
and made again when the checkout's code or the aiohttp version changes. Its runs go through
``reference_worker.py``, run by path with that venv's interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from pacore_graph.extend import UsageError

REFERENCE_FILES = ("pyproject.toml", "pacore/batch_inference/base_exp.py", "pacore/utils.py")
WORKER = Path(__file__).with_name("reference_worker.py")


class ReferenceSetupFailed(RuntimeError):
    """The checkout is not the reference pipeline, or installing it failed; the message says which."""


def check_checkout(path: str | Path) -> Path:
    """The checkout's folder, or a one-line error (a refused argument) before anything is spent."""
    folder = Path(path).expanduser().resolve()
    missing = [name for name in REFERENCE_FILES if not (folder / name).is_file()]
    if missing:
        raise UsageError(
            f"--reference {path}: not a checkout of stepfun-ai/PaCoRe (no {', '.join(missing)}); "
            "clone https://github.com/stepfun-ai/PaCoRe and pass its folder"
        )
    return folder


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pacore-graph"


def _fingerprint(folder: Path, aiohttp_version: str) -> str:
    digest = hashlib.sha256(f"{folder}\n{aiohttp_version}\n{sys.version_info[:2]}".encode())
    for name in REFERENCE_FILES:
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()[:16]


def reference_python(checkout: str | Path, cache: Path | None = None) -> str:
    """The interpreter of a venv with the checkout installed (made on first use, then reused)."""
    import aiohttp

    folder = check_checkout(checkout)
    key = _fingerprint(folder, aiohttp.__version__)
    venv = (cache or _cache_root()) / f"reference-venv-{key}"
    python = venv / "bin" / "python"
    stamp = venv / "installed.json"
    if stamp.is_file() and python.exists():
        return str(python)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", str(folder), f"aiohttp=={aiohttp.__version__}"],
    ]
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise ReferenceSetupFailed(f"installing the reference from {folder} failed: {tail[0]}")
    stamp.write_text(json.dumps({"checkout": str(folder), "aiohttp": aiohttp.__version__}) + "\n")
    return str(python)
