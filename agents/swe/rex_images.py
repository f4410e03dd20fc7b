"""SWE-ReX's server inside the images pacore builds, so a sandbox host needs only Docker and the image.

Sandboxes have no network, so the server cannot be fetched when a container starts (``pipx run swe-rex``,
SWE-ReX's own fallback, fails there). Instead a layer over each Debian base holds it: a virtual
environment at ``/opt/pacore/rex`` made by the image's Python from wheels this host's pip downloaded for it
(``wheelhouse.py``, cached per release), and ``pacore-rex-serve``, which starts SWE-ReX's server with its
token taken from a file or an environment variable, never from its command line (where ``ps`` in the
container, or ``docker inspect``, would show it). Local task images and the environment images of real
rows are built on this layer. SWE-ReX needs Python 3.10 or newer: rows built on Debian bullseye (Python
3.9) get no server, and ``--runtime swerex`` says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pacore_agents.swe.images import (
    ImageBuildError,
    base_image_name,
    build_image,
    build_lock,
    ensure_base_image,
    image_label,
)
from pacore_agents.swe.specs import DEBIAN_PYTHON
from pacore_agents.swe.wheelhouse import WheelhouseError, download_wheels

if TYPE_CHECKING:
    from docker import DockerClient

REX_HOME = "/opt/pacore/rex"
REX_PYTHON = f"{REX_HOME}/bin/python"
REX_SERVE = f"{REX_HOME}/bin/pacore-rex-serve"
REX_REQUIREMENTS = ("swe-rex==1.4.0",)
REX_RECIPE_LABEL = "pacore.rex_recipe"
TOKEN_FILE_VARIABLE = "SWEREX_TOKEN_FILE"
TOKEN_VARIABLE = "SWEREX_TOKEN"

SERVE = f'''#!{REX_PYTHON}
"""SWE-ReX's server with its token from ${TOKEN_FILE_VARIABLE} (a file) or ${TOKEN_VARIABLE}, never the command line."""
import argparse, os, sys

import uvicorn
from swerex import server

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
parser.add_argument("--port", type=int, default=8000)
args = parser.parse_args()
path = os.environ.pop("{TOKEN_FILE_VARIABLE}", "")
token = open(path).read().strip() if path else os.environ.pop("{TOKEN_VARIABLE}", "").strip()
if not token:
    sys.exit("pacore-rex-serve: no token: set {TOKEN_FILE_VARIABLE} (a file) or {TOKEN_VARIABLE}")
server.AUTH_TOKEN = token
# Long keep-alive: pacore keeps one connection per sandbox between the model's commands.
uvicorn.run(server.app, host=args.host, port=args.port, timeout_keep_alive=3600, log_level="warning")
'''


def supports_rex(release: str) -> bool:
    """Whether the release's Python can run SWE-ReX's server (3.10 or newer)."""
    major, minor = (int(part) for part in DEBIAN_PYTHON[release].split(".")[:2])
    return (major, minor) >= (3, 10)


def rex_image_name(release: str) -> str:
    return base_image_name(release, "rex")


def wheel_cache(release: str, machine: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pacore-graph" / "rex-wheels"
    return root / f"{release}-{machine}"


def ensure_rex_image(client: DockerClient, *, release: str, log: Callable[[str], None] = print) -> str:
    """The Debian ``release`` base with SWE-ReX's server in ``/opt/pacore/rex``; built once (wheels cached)."""
    if not supports_rex(release):
        raise ImageBuildError(
            f"SWE-ReX's server needs Python 3.10 or newer; Debian {release} has {DEBIAN_PYTHON[release]}"
        )
    base = ensure_base_image(client, release=release, log=log)
    name = rex_image_name(release)
    architecture = str((client.info() or {}).get("Architecture") or "x86_64")
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(architecture, architecture)
    wheels = wheel_cache(release, machine)
    with build_lock(name):
        if not (wheels / "complete").exists():
            log(f"downloading SWE-ReX's wheels for Python {DEBIAN_PYTHON[release]} ({release}), once")
            shutil.rmtree(wheels, ignore_errors=True)
            try:
                download_wheels(
                    list(REX_REQUIREMENTS),
                    dest=wheels,
                    python=DEBIAN_PYTHON[release],
                    release=release,
                    machine=machine,
                    log=log,
                )
            except WheelhouseError as exc:
                raise ImageBuildError(f"SWE-ReX's wheels for {release}: {exc}") from exc
            (wheels / "complete").write_text("")
        files = sorted(path.name for path in wheels.glob("*.whl"))
        recipe = hashlib.sha256("\n".join([base, _dockerfile(base), SERVE, *files]).encode()).hexdigest()[:16]
        if image_label(client, name, REX_RECIPE_LABEL) == recipe:
            return name
        log(f"building {name} (SWE-ReX's server in {REX_HOME})")
        with tempfile.TemporaryDirectory(prefix="pacore-rex-") as tmp:
            shutil.copytree(wheels, Path(tmp) / "wheels")
            (Path(tmp) / "pacore-rex-serve").write_text(SERVE)
            (Path(tmp) / "Dockerfile").write_text(_dockerfile(base))
            build_image(client, Path(tmp), name, {REX_RECIPE_LABEL: recipe})
    return name


def _dockerfile(base: str) -> str:
    requirements = " ".join(REX_REQUIREMENTS)
    return (
        f"FROM {base}\n"
        "COPY wheels /tmp/rex-wheels\n"
        f"COPY pacore-rex-serve {REX_SERVE}\n"
        f"RUN python3 -m venv {REX_HOME} && {REX_PYTHON} -m pip install -q --no-index --find-links /tmp/rex-wheels"
        f" {requirements} && rm -rf /tmp/rex-wheels && chmod 755 {REX_SERVE}\n"
    )
