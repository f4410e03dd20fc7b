"""SWE-ReX's server inside the images pacore builds, so a sandbox host needs only Docker and the image.

Sandboxes have no network, so the server cannot be fetched when a container starts (``pipx run swe-rex``,
SWE-ReX's own fallback, fails there). Nor can it run on the image's own Python everywhere: SWE-ReX needs
Python 3.10 or newer, and most real rows run on Debian bullseye's 3.9. So the server gets an interpreter of
its own: ``/opt/pacore/rex`` holds bookworm's Python 3.11, its standard library, SWE-ReX with its
dependencies (wheels this host's pip downloaded, cached) and every shared library they load, the C library
and its loader included; ``bin/python`` starts that interpreter through that loader, isolated (``-I``).
It depends on nothing in the image and changes nothing there: no environment variable, no path, so the
commands of an episode see the image exactly as without it. The folder is assembled once in
``pacore-swe.rex-runtime:bookworm`` and copied onto each release's base (``pacore-swe.rex:RELEASE``), on
which local task images and the environments of real rows are built. It costs each host about 90 MB once
per Debian release, shared by every image of that release.

``pacore-rex-serve`` starts SWE-ReX's server with its token taken from a file or an environment variable,
never from its command line (where ``ps`` in the container, or ``docker inspect``, would show it).
Images carry the runtime's recipe in the label ``pacore.rex_recipe`` (inherited by every image built on
them), so an image made by an older pacore is rebuilt, not run without the server it needs.
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
    base_recipe,
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
RUNTIME_RELEASE = "bookworm"  # whose Python and libraries the server runs on, in every image
RUNTIME_IMAGE = base_image_name(RUNTIME_RELEASE, "rex-runtime")
RUNTIME_LABEL = "pacore.rex_runtime"
REX_RECIPE_LABEL = "pacore.rex_recipe"
TOKEN_FILE_VARIABLE = "SWEREX_TOKEN_FILE"
TOKEN_VARIABLE = "SWEREX_TOKEN"

SERVE = f'''"""SWE-ReX's server, its token from ${TOKEN_FILE_VARIABLE} (a file) or ${TOKEN_VARIABLE}, not arguments."""
import argparse, os, sys

import uvicorn
from swerex import server

parser = argparse.ArgumentParser(prog="pacore-rex-serve", description=__doc__)
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

# Run in the bookworm base, without network: SWE-ReX from the wheels, the interpreter and its standard
# library, then every shared library the interpreter and the extension modules link (ldd), and the loader.
ASSEMBLE = f"""set -e
R={REX_HOME}
version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
python3 -m venv /tmp/pip-env
/tmp/pip-env/bin/python -m pip install -q --no-index --find-links /tmp/rex-wheels \\
    --target "$R/usr/lib/python3/dist-packages" {" ".join(REX_REQUIREMENTS)}
rm -rf /tmp/pip-env /tmp/rex-wheels "$R/usr/lib/python3/dist-packages/bin"
mkdir -p "$R/usr/bin" "$R/lib" "$R/bin"
cp "$(readlink -f /usr/bin/python3)" "$R/usr/bin/python$version"
cp -a "/usr/lib/python$version" "$R/usr/lib/"
rm -rf "$R/usr/lib/python$version/test" "$R/usr/lib/python$version/idlelib" "$R/usr/lib/python$version/tkinter"
{{ ldd "$R/usr/bin/python$version"; find "$R/usr" -name '*.so*' -type f -exec ldd {{}} \\; ; }} 2>/dev/null \\
    | sed -n 's|.*=> \\(/[^ ]*\\) .*|\\1|p' | sort -u | while read -r lib; do cp -L "$lib" "$R/lib/"; done
cp -L "$(ldd "$R/usr/bin/python$version" | sed -n 's|^[[:space:]]*\\(/[^ ]*ld-linux[^ ]*\\) .*|\\1|p')" "$R/lib/ld.so"
printf '#!/bin/sh\\nexec %s/lib/ld.so --library-path %s/lib %s/usr/bin/python%s -I "$@"\\n' "$R" "$R" "$R" "$version" \\
    > "$R/bin/python"
printf '#!/bin/sh\\nexec %s/bin/python %s/serve.py "$@"\\n' "$R" "$R" > "$R/bin/pacore-rex-serve"
chmod 755 "$R/bin/python" "$R/bin/pacore-rex-serve"
"$R/bin/python" -c 'import ctypes, json, ssl, swerex.server, uvicorn'
"""


def rex_image_name(release: str) -> str:
    return base_image_name(release, "rex")


def wheel_cache(machine: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pacore-graph" / "rex-wheels"
    return root / f"{RUNTIME_RELEASE}-{machine}"


def rex_recipe(release: str) -> str:
    """The hash of what ``pacore-swe.rex:RELEASE`` is made of, known without Docker: its base's recipe and the
    runtime's (this module's scripts; SWE-ReX's version is pinned). Images built on it inherit it as a label."""
    return _digest(base_recipe(release), base_recipe(RUNTIME_RELEASE), _RUNTIME_RECIPE)


def ensure_rex_image(client: DockerClient, *, release: str, log: Callable[[str], None] = print) -> str:
    """The Debian ``release`` base with SWE-ReX's server in ``/opt/pacore/rex``; built once (wheels cached)."""
    if release not in DEBIAN_PYTHON:
        raise ImageBuildError(f"no Debian base for {release} (known: {', '.join(DEBIAN_PYTHON)})")
    name, recipe = rex_image_name(release), rex_recipe(release)
    if image_label(client, name, REX_RECIPE_LABEL) == recipe:
        return name
    runtime = ensure_rex_runtime(client, log=log)
    base = ensure_base_image(client, release=release, log=log)
    with build_lock(name):
        if image_label(client, name, REX_RECIPE_LABEL) == recipe:
            return name
        log(f"building {name} (SWE-ReX's server in {REX_HOME})")
        with tempfile.TemporaryDirectory(prefix="pacore-rex-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(_dockerfile(base, runtime))
            build_image(client, Path(tmp), name, {REX_RECIPE_LABEL: recipe})
    return name


def ensure_rex_runtime(client: DockerClient, *, log: Callable[[str], None] = print) -> str:
    """The image holding the assembled ``/opt/pacore/rex`` (on the bookworm base); built once."""
    recipe = _digest(base_recipe(RUNTIME_RELEASE), _RUNTIME_RECIPE)
    if image_label(client, RUNTIME_IMAGE, RUNTIME_LABEL) == recipe:
        return RUNTIME_IMAGE
    base = ensure_base_image(client, release=RUNTIME_RELEASE, log=log)
    architecture = str((client.info() or {}).get("Architecture") or "x86_64")
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(architecture, architecture)
    wheels = wheel_cache(machine)
    with build_lock(RUNTIME_IMAGE):
        if image_label(client, RUNTIME_IMAGE, RUNTIME_LABEL) == recipe:
            return RUNTIME_IMAGE
        if not (wheels / "complete").exists():
            python = DEBIAN_PYTHON[RUNTIME_RELEASE]
            log(f"downloading SWE-ReX's wheels for Python {python} ({RUNTIME_RELEASE}), once")
            shutil.rmtree(wheels, ignore_errors=True)
            try:
                download_wheels(
                    list(REX_REQUIREMENTS),
                    dest=wheels,
                    python=python,
                    release=RUNTIME_RELEASE,
                    machine=machine,
                    log=log,
                )
            except WheelhouseError as exc:
                raise ImageBuildError(f"SWE-ReX's wheels: {exc}") from exc
            (wheels / "complete").write_text("")
        log(f"building {RUNTIME_IMAGE} (SWE-ReX's server with an interpreter of its own)")
        with tempfile.TemporaryDirectory(prefix="pacore-rex-") as tmp:
            shutil.copytree(wheels, Path(tmp) / "wheels")
            (Path(tmp) / "serve.py").write_text(SERVE)
            (Path(tmp) / "assemble.sh").write_text(ASSEMBLE)
            (Path(tmp) / "Dockerfile").write_text(_runtime_dockerfile(base))
            build_image(client, Path(tmp), RUNTIME_IMAGE, {RUNTIME_LABEL: recipe})
    return RUNTIME_IMAGE


def has_rex_server(client: DockerClient, image: str) -> bool:
    """Whether ``image`` was built on a base with the server (its ``pacore.rex_recipe`` label, inherited)."""
    return image_label(client, image, REX_RECIPE_LABEL) is not None


def _runtime_dockerfile(base: str) -> str:
    return (
        f"FROM {base}\n"
        "COPY wheels /tmp/rex-wheels\n"
        f"COPY serve.py {REX_HOME}/serve.py\n"
        "COPY assemble.sh /tmp/assemble.sh\n"
        "RUN sh /tmp/assemble.sh && rm /tmp/assemble.sh\n"
    )


def _dockerfile(base: str, runtime: str) -> str:
    return f"FROM {base}\nCOPY --from={runtime} {REX_HOME} {REX_HOME}\n"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


_RUNTIME_RECIPE = _digest(
    _runtime_dockerfile(base_image_name(RUNTIME_RELEASE)), _dockerfile("BASE", RUNTIME_IMAGE), SERVE, ASSEMBLE
)
