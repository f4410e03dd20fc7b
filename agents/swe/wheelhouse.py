"""Wheels for an image's Python, fetched on this host with pip, so that image builds need no network.

The host's own pip resolves and downloads (``pip download --only-binary=:all: --python-version X
--platform manylinux...``), so whatever index this host's pip is configured with (``PIP_INDEX_URL``,
``pip.conf``, a mirror for air-gapped machines) is the one used. ``--python-version`` alone still
evaluates environment markers (``tomli; python_version < "3.11"``) for the host's Python, so pip runs
with its marker environment set to the image's. A requirement that exists only as a source
distribution is downloaded here and built into a wheel by the image's own Python (``build``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# glibc of each Debian release: which manylinux wheels its Python can load.
DEBIAN_GLIBC = {"bullseye": 31, "bookworm": 36, "trixie": 41}
# How pip names a requirement without a usable wheel: directly, or inside a resolution conflict.
_MISSING = re.compile(
    r"No matching distribution found for (\S+)"
    r"|no matching distributions available for your environment:\s*\n\s+(\S+)"
)
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
MAX_SOURCE_BUILDS = 20
# Runs pip with the image's marker environment; pip itself is unchanged (plain pip if its layout differs).
_PIP_FOR_TARGET = """
import json, runpy, sys
target = json.loads(sys.argv.pop(1))
try:
    from pip._vendor.packaging import markers
except ImportError:
    pass
else:
    host_environment = markers.default_environment
    markers.default_environment = lambda: {**host_environment(), **target}
sys.argv[0] = "pip"
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""


class WheelhouseError(RuntimeError):
    """pip could not provide every wheel; the message carries pip's own explanation."""


def check_pip_date_filter(python: str | None = None) -> None:
    """Raise WheelhouseError, saying what to do, unless ``python``'s pip (the one wheels are downloaded with)
    knows ``--uploaded-prior-to``: pip 26.0 added it, a new venv ships an older pip, and its "no such option"
    would come only after the base images are built. ``python``: this one by default."""
    python = python or sys.executable
    done = _pip([python, "-m", "pip", "download", "--help"], None)
    if "--uploaded-prior-to" in done.stdout:
        return
    version = _pip([python, "-m", "pip", "--version"], None).stdout.split()[1:2] or ["(none)"]
    raise WheelhouseError(
        f"--pypi-before needs a pip that knows --uploaded-prior-to (pip 26.0 or newer; this Python's pip is "
        f"{version[0]}): run `{python} -m pip install -U 'pip>=26'`, or pass --pypi-before now"
    )


def canonical_name(requirement: str) -> str | None:
    match = _NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


def read_requirement_file(path: Path) -> list[str]:
    """Requirement lines of a file, ``-r`` includes inlined; options, comments and ``-e``/``.`` lines dropped."""
    lines: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            included = path.parent / line.split(None, 1)[1]
            if included.exists():
                lines += read_requirement_file(included)
        elif line and not line.startswith(("#", "-", ".")):
            lines.append(line)
    return lines


def merge_requirements(base: Iterable[str], overrides: Iterable[str]) -> list[str]:
    """``base`` with every package that ``overrides`` names replaced by the override (as swebench's pins win)."""
    overrides = list(dict.fromkeys(overrides))
    pinned = {canonical_name(line) for line in overrides}
    return [line for line in dict.fromkeys(base) if canonical_name(line) not in pinned] + overrides


def marker_environment(python_full: str, machine: str) -> dict[str, str]:
    """PEP 508 marker values of CPython ``python_full`` on Linux ``machine``."""
    return {
        "python_version": ".".join(python_full.split(".")[:2]),
        "python_full_version": python_full,
        "implementation_name": "cpython",
        "implementation_version": python_full,
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_system": "Linux",
        "platform_machine": machine,
    }


def platform_tags(release: str, machine: str) -> list[str]:
    glibc = DEBIAN_GLIBC[release]
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc, 16, -1)]
    tags.append(f"linux_{machine}")  # wheels built from source for the image
    if machine in ("x86_64", "i686"):
        tags += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    elif machine == "aarch64":
        tags.append("manylinux2014_aarch64")
    return tags


def download_wheels(
    requirements: list[str],
    *,
    dest: Path,
    python: str,
    release: str,
    machine: str,
    env: dict[str, str] | None = None,
    build: Callable[[Path, Path], Path] | None = None,
    before: str | None = None,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Fill ``dest`` with wheels of ``requirements`` and their dependencies, for the image's Python.

    One resolution covers them all, so the wheelhouse holds one consistent version of each package.
    ``before``: only files uploaded before this date (pip's ``--uploaded-prior-to``), so that what the
    recipe leaves unpinned resolves as it did when SWE-bench's environments were made, not as today.
    ``build(source_distribution, dest)`` makes a wheel of a package that has none (in the image, since
    only its Python and C library can build one that it will load); without it, such a package is an error.
    Returns the wheels in ``dest``.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pacore-reqs-") as tmp:
        listing = Path(tmp) / "requirements.txt"
        listing.write_text("".join(f"{line}\n" for line in requirements))
        target = json.dumps(marker_environment(python, machine))
        command = [
            sys.executable,
            "-c",
            _PIP_FOR_TARGET,
            target,
            "download",
            "--dest",
            str(dest),
            "--only-binary=:all:",
            "--python-version",
            python,
            "--implementation",
            "cp",
            *[arg for tag in platform_tags(release, machine) for arg in ("--platform", tag)],
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "-r",
            str(listing),
            *(["--uploaded-prior-to", before] if before else []),
        ]
        # Wheels built here join as files (not through --find-links, which would replace the user's own).
        built: list[str] = []
        tried: set[str] = set()
        for _ in range(MAX_SOURCE_BUILDS):
            done = _pip(command + built, env)
            if done.returncode == 0:
                return sorted(dest.glob("*.whl"))
            requirement = missing_requirement(done.stdout + done.stderr)
            if requirement is None or requirement in tried:
                raise WheelhouseError(f"pip download for Python {python} failed:\n{_tail(done)}")
            tried.add(requirement)
            built.append(str(_build_from_source(requirement, dest, python, env, build, before, log)))
    raise WheelhouseError(f"pip download for Python {python}: more than {MAX_SOURCE_BUILDS} source-only packages")


def missing_requirement(pip_output: str) -> str | None:
    """The requirement pip found no wheel for: named directly, or in a conflict report, where the specifier
    comes from the "X depends on NAME<2 and >=1" lines."""
    found = _MISSING.search(pip_output)
    if found is None or found.group(1):
        return found.group(1) if found else None
    name = found.group(2)
    wanted = re.search(rf"depends on {re.escape(name)}([^\n;]*)", pip_output, re.I)
    return name + wanted.group(1).replace(" and ", ",").replace(" ", "") if wanted else name


def stand_in_wheel(folder: Path, metadata: dict[str, Any]) -> Path:
    """A wheel that only declares a project (name, version, extras, requirements), built from its core
    metadata: pip then resolves the project's dependencies with the project itself (some depend back on
    it, e.g. Sphinx's sphinxcontrib-* packages) without building it on this host."""
    name, version = metadata["name"], metadata["version"]
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Provides-Extra: {extra}" for extra in metadata.get("provides_extra") or []),
        *(f"Requires-Dist: {requirement}" for requirement in metadata.get("requires_dist") or []),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{stem}.dist-info/METADATA", "\n".join(lines) + "\n")
        wheel.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{stem}.dist-info/RECORD", "")
    return path


def _build_from_source(
    requirement: str,
    dest: Path,
    python: str,
    env: dict[str, str] | None,
    build: Callable[[Path, Path], Path] | None,
    before: str | None,
    log: Callable[[str], None],
) -> Path:
    """Fetch the source distribution of ``requirement`` and have ``build`` make it a wheel in ``dest``."""
    if build is None:
        raise WheelhouseError(f"{requirement} has no wheel for Python {python}")
    log(f"no wheel of {requirement} for Python {python}: building it from source with the image's Python")
    with tempfile.TemporaryDirectory(prefix="pacore-sdist-") as tmp:
        done = _pip(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                tmp,
                "--disable-pip-version-check",
                "--progress-bar",
                "off",
                requirement,
                *(["--uploaded-prior-to", before] if before else []),
            ],
            env,
        )
        sources = [path for path in Path(tmp).iterdir() if path.is_file()]
        if done.returncode != 0 or not sources:
            raise WheelhouseError(f"{requirement} has no wheel for Python {python} and no source:\n{_tail(done)}")
        return build(sources[0], dest)


def _pip(command: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})


def _tail(done: subprocess.CompletedProcess[str], lines: int = 25) -> str:
    text = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("WARNING:"))
    return "\n".join(text.splitlines()[-lines:])
