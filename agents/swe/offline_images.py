"""Images for real SWE-bench rows, built here without conda or Docker Hub.

Three layers, each cached by Docker:

* base: a Debian root file system (debootstrap) whose Python matches the repository version's needs
  (bullseye 3.9, bookworm 3.11, trixie 3.13; see ``specs.py``), with SWE-ReX's server and an interpreter
  of its own in ``/opt/pacore/rex`` (``rex_images.py``);
* environment: a virtual environment at ``/opt/pacore/venv`` with the version's packages, installed
  from a wheelhouse that this host's pip downloaded (``wheelhouse.py``). The wheelhouse stays in the
  image and pip is told to use only it, so the row's ``eval_script`` can rerun its install step with
  the container's network off. ``/opt/miniconda3/bin/activate`` stands in for conda's, since eval
  scripts start with ``source /opt/miniconda3/bin/activate; conda activate testbed``;
* instance: the repository at the base commit in ``/testbed`` (one commit, which ``refs/replace``
  makes answer to the row's ``base_commit``, so ``git diff BASE`` and ``git checkout BASE -- f``
  work as in the official images), installed by the version's install command.

The image is named ``pacore-swe.sweb.eval.<instance id>:latest``; :func:`image_for` finds it for a
row whose official image is not on the host.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pacore_agents.swe.docker_files import read_folder, write_tar
from pacore_agents.swe.images import (
    CONTAINER_WORKDIR,
    GIT_ENV,
    ImageBuildError,
    build_image,
    build_lock,
    docker_client,
    ensure_base_image,
    image_exists,
    image_label,
)
from pacore_agents.swe.owners import owner_labels
from pacore_agents.swe.rex_images import REX_RECIPE_LABEL, ensure_rex_image, rex_recipe
from pacore_agents.swe.snapshots import SnapshotError, extract_snapshot, find_snapshot, tree_digest
from pacore_agents.swe.specs import DEBIAN_PYTHON, InstallSpec, UnsupportedRowError, image_env, spec_for
from pacore_agents.swe.wheelhouse import (
    WheelhouseError,
    download_wheels,
    merge_requirements,
    read_requirement_file,
    stand_in_wheel,
)

if TYPE_CHECKING:
    from docker import DockerClient  # docker-py ships no types: Any to the checker

Log = Callable[[str], None]

VENV = "/opt/pacore/venv"
WHEELS = "/opt/pacore/wheels"
IMAGE_PREFIX = "pacore-swe.sweb.eval."
RECIPE_LABEL = "pacore.recipe"
SNAPSHOT_LABEL = "pacore.snapshot"  # content hash of the repository tree the image was built from
# SWE-bench Verified's environments were made in mid-2024: later releases of what a recipe leaves unpinned
# can break old repositories (docutils 0.22 dropped what Sphinx 3 imports).
PYPI_BEFORE = "2024-08-01T00:00:00Z"
ALWAYS = ("pip", "setuptools", "wheel")  # what `pip install -e .` needs offline with build isolation

ACTIVATE = f"""# pacore: stands in for conda's activate script; this image has a virtual environment, no conda.
export VIRTUAL_ENV={VENV}
case ":$PATH:" in *":{VENV}/bin:"*) ;; *) export PATH="{VENV}/bin:$PATH" ;; esac
conda() {{ return 0; }}
"""
# Python finds a virtual environment next to the program it was started as, so a link to the environment's
# python from elsewhere (tox --current-env makes one) starts the plain interpreter. Conda's python, a whole
# prefix, has no such gap: this puts the environment's packages first for such a start.
SITECUSTOMIZE = f"""# pacore: the environment {VENV} also for its python reached through a link from elsewhere
import os, site, sys
if sys.prefix == sys.base_prefix and os.path.realpath(sys.executable).startswith("{VENV}/"):
    before = list(sys.path)
    for folder in site.getsitepackages(["{VENV}"]):
        site.addsitedir(folder)
    sys.path[:] = [p for p in sys.path if p not in before] + before
"""
CONDA = f"""#!/bin/sh
# pacore: no conda in this image; the environment is the virtual environment {VENV} (already on PATH).
[ "$1" = activate ] || [ "$1" = deactivate ] || echo "conda is not installed here; use {VENV}" >&2
"""


def offline_image_name(row: dict[str, Any]) -> str:
    return f"{IMAGE_PREFIX}{row['instance_id'].lower()}:latest"


def image_for(client: DockerClient, row: dict[str, Any]) -> str | None:
    """The image a sandbox for ``row`` should use: the row's own if present, else one built here."""
    own: str = row["image"]
    if image_exists(client, own):
        return own
    built = offline_image_name(row)
    return built if image_exists(client, built) else None


def ensure_offline_image(
    row: dict[str, Any],
    repos: Path | None,
    client: DockerClient | None = None,
    *,
    pypi_before: str | None = PYPI_BEFORE,
    log: Log = print,
    rebuild: bool = False,
) -> str:
    """Build the row's image from its snapshot in ``repos`` unless it exists; return its name.

    ``pypi_before``: packages are taken as PyPI had them then (None: as it has them now).
    """
    client = client or docker_client()
    name = offline_image_name(row)
    try:
        spec = spec_for(row)
    except UnsupportedRowError as exc:
        raise ImageBuildError(str(exc)) from exc
    if _current(client, name, spec) and not rebuild:
        return name
    try:
        if repos is None:
            raise SnapshotError(f"{row['instance_id']}: building its image needs --repos DIR holding its snapshot")
        source = find_snapshot(Path(repos), row)
    except SnapshotError as exc:
        raise ImageBuildError(str(exc)) from exc
    with build_lock(name):
        if _current(client, name, spec) and not rebuild:
            return name
        with tempfile.TemporaryDirectory(prefix="pacore-instance-") as tmp:
            work = Path(tmp)
            try:
                extract_snapshot(source, row, work / "repo")
            except SnapshotError as exc:
                raise ImageBuildError(str(exc)) from exc
            labels = {"pacore.instance_id": row["instance_id"], SNAPSHOT_LABEL: tree_digest(work / "repo")}
            env_image = _ensure_environment(client, row, spec, work, pypi_before, log)
            (work / "Dockerfile").write_text(_instance_dockerfile(env_image, spec, row))
            log(f"{row['instance_id']}: building {name} on {env_image}")
            try:
                build_image(client, work, name, labels)
            except ImageBuildError as exc:
                raise ImageBuildError(f"{row['instance_id']}: {exc}") from exc
    return name


def _current(client: DockerClient, name: str, spec: InstallSpec) -> bool:
    """Whether the image exists on the base this pacore builds (an older pacore's image lacks its server)."""
    return image_label(client, name, REX_RECIPE_LABEL) == rex_recipe(spec.release)


# ------------------------------------------------------------------------------------------ environment


def environment_requirements(spec: InstallSpec, repo: Path) -> list[str]:
    """The packages of the environment: the repository's requirement file, overridden by the version's pins."""
    from_file: list[str] = []
    for relative in spec.requirement_files:
        if (repo / relative).exists():
            from_file = read_requirement_file(repo / relative)
            break
    return merge_requirements(from_file, spec.packages) + list(ALWAYS)


def build_requirements(repo: Path) -> list[str]:
    """``[build-system] requires`` of the repository (pip needs them in the wheelhouse to install it)."""
    pyproject = repo / "pyproject.toml"
    if not pyproject.exists():
        return []
    try:
        return list(tomllib.loads(pyproject.read_text()).get("build-system", {}).get("requires", []))
    except tomllib.TOMLDecodeError:
        return []


def _ensure_environment(
    client: DockerClient, row: dict[str, Any], spec: InstallSpec, work: Path, before: str | None, log: Log
) -> str:
    """The environment image of the row: its base, and a virtual environment from a wheelhouse fetched here."""
    base = ensure_rex_image(client, release=spec.release, log=log)  # a sandbox host needs only Docker and the image
    requirements = environment_requirements(spec, work / "repo")
    wheels = work / "environment" / "wheels"
    files = _fill_wheelhouse(client, row, spec, base, requirements, wheels, work, before, log)
    (wheels / "requirements.txt").write_text("".join(f"{line}\n" for line in requirements))
    # Named by what it holds: wheel names carry name and version (a wheel built here again differs in bytes only).
    recipe = "\n".join(
        [
            _environment_dockerfile(base),
            rex_recipe(spec.release),
            ACTIVATE,
            CONDA,
            SITECUSTOMIZE,
            *requirements,
            *(wheel.name for wheel in files),
        ]
    )
    tag = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    name = f"pacore-swe.env.{re.sub(r'[^a-z0-9]+', '_', row['repo'].lower())}:{tag}"
    with build_lock(name):
        if image_exists(client, name):
            return name
        context = work / "environment"
        (context / "activate").write_text(ACTIVATE)
        (context / "conda").write_text(CONDA)
        (context / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (context / "Dockerfile").write_text(_environment_dockerfile(base))
        log(f"{row['instance_id']}: building environment {name} ({len(files)} wheels)")
        build_image(client, context, name, {RECIPE_LABEL: tag})
    return name


def _fill_wheelhouse(
    client: DockerClient,
    row: dict[str, Any],
    spec: InstallSpec,
    base: str,
    requirements: list[str],
    wheels: Path,
    work: Path,
    before: str | None,
    log: Log,
) -> list[Path]:
    """Every wheel the environment and the repository's install need, for the image's Python."""
    python, machine, env = DEBIAN_PYTHON[spec.release], _daemon_machine(client), image_env(spec, row)
    build = SourceBuilder(client, spec.release, work / "build-wheels", log)
    fetch = functools.partial(
        download_wheels,
        python=python,
        release=spec.release,
        machine=machine,
        env=env,
        before=before,
        log=log,
        build=build,
    )
    building = build_requirements(work / "repo") + list(ALWAYS)
    log(f"{row['instance_id']}: downloading wheels for Python {python} ({spec.release})")
    try:
        fetch(building, dest=work / "build-wheels")
        project = stand_in_wheel(
            work / "stand-in", project_metadata(client, base, work / "repo", work / "build-wheels", spec, env)
        )
        extras = install_extras(spec.install)
        # Two resolutions into one wheelhouse, as swebench installs: the environment's packages first, then
        # the repository (a stand-in declaring its dependencies: some depend back on it) with what it needs;
        # its install may change a version the environment pinned.
        fetch(requirements, dest=wheels)
        files = fetch([f"{project}[{','.join(extras)}]" if extras else str(project), *building], dest=wheels)
    except WheelhouseError as exc:
        raise ImageBuildError(f"{row['instance_id']}: {exc}") from exc
    (wheels / project.name).unlink()
    return [wheel for wheel in files if wheel.name != project.name]


class SourceBuilder:
    """Builds a source distribution into a wheel with the image's Python, in a container without network:
    on the base image first, on the builder image (a C compiler, Python's headers) when that fails."""

    SCRIPT = (
        "set -e; python3 -m venv /tmp/v; /tmp/v/bin/python -m pip install -q --no-index --find-links /w --upgrade pip"
        " && /tmp/v/bin/python -m pip wheel -q --no-deps --no-index --find-links /w -w /out /src/*"
    )

    def __init__(self, client: DockerClient, release: str, build_wheels: Path, log: Log):
        self.client, self.release, self.build_wheels, self.log = client, release, build_wheels, log

    def __call__(self, source: Path, dest: Path) -> Path:
        failure = ""
        for builder in (False, True):
            image = ensure_base_image(self.client, release=self.release, builder=builder, log=self.log)
            with tempfile.TemporaryDirectory(prefix="pacore-build-") as tmp:
                (Path(tmp) / "src").mkdir()
                shutil.copy(source, Path(tmp) / "src" / source.name)
                status, output, files = run_once(
                    self.client,
                    image,
                    ["bash", "-c", self.SCRIPT],
                    {},
                    {"src": Path(tmp) / "src", "w": self.build_wheels},
                    "/out",
                )
            wheels = [name for name in files if name.endswith(".whl")]
            if status == 0 and wheels:
                (dest / wheels[0]).write_bytes(files[wheels[0]])
                return dest / wheels[0]
            failure = output[-3000:]
        raise WheelhouseError(f"{source.name} did not build with the image's Python:\n{failure}")


def run_once(
    client: DockerClient, image: str, command: list[str], env: dict[str, str], inputs: dict[str, Path], outputs: str
) -> tuple[int, str, dict[str, bytes]]:
    """Run ``command`` once in a fresh container without network, ``inputs`` copied to ``/NAME``; return its
    exit status, its output and the regular files under ``outputs`` (by name) when it has finished."""
    container = client.containers.create(
        image, command, network_mode="none", environment=env, labels=owner_labels(), working_dir="/"
    )
    try:
        with tempfile.TemporaryFile() as archive:
            write_tar(archive, inputs)
            archive.seek(0)
            container.put_archive("/", archive)
        container.start()
        status = container.wait(timeout=1800).get("StatusCode")
        output = container.logs().decode(errors="replace")
        files = read_folder(container, outputs) if status == 0 else {}
    finally:
        container.remove(force=True)
    return status, output, files


_METADATA_SCRIPT = (
    "mkdir -p /tmp/report; python3 -m venv /tmp/v"
    "; /tmp/v/bin/python -m pip install -q --no-index --find-links /w --upgrade pip"
    " && /tmp/v/bin/python -m pip install -q --no-index --find-links /w --dry-run --no-deps --ignore-installed"
    " --report /tmp/report/report.json /repo"
)


def install_extras(install: str) -> list[str]:
    """The extras an install command asks for: ``pip install -e .[test]`` -> ``["test"]``."""
    found = re.search(r"\.\[([^\]]+)\]", install)
    return [extra.strip() for extra in found.group(1).split(",")] if found else []


def project_metadata(
    client: DockerClient, base: str, repo: Path, wheels: Path, spec: InstallSpec, env: dict[str, str]
) -> dict[str, Any]:
    """The repository's core metadata (name, version, requires_dist, ...) as the image's Python builds it.

    Built after the recipe's ``pre_install`` steps (they may pin dependencies), in a container without
    network: an old ``setup.py`` often no longer runs on this host's newer Python.
    """
    script = "; ".join(["set -e", "cd /repo", *spec.pre_install, "cd /", _METADATA_SCRIPT])
    status, output, files = run_once(
        client, base, ["bash", "-c", script], env, {"repo": repo, "w": wheels}, "/tmp/report"
    )
    if status != 0:
        raise ImageBuildError(f"reading the repository's dependencies failed ({status}):\n{output[-3000:]}")
    metadata: dict[str, Any] = json.loads(files["report.json"])["install"][0]["metadata"]
    return metadata


def _environment_dockerfile(base: str) -> str:
    # --copies: the environment's python is its own file, so a link to it resolves into the environment.
    return (
        f"FROM {base}\n"
        f"COPY wheels {WHEELS}\n"
        "COPY activate /opt/miniconda3/bin/activate\n"
        "COPY conda /opt/miniconda3/bin/conda\n"
        "COPY sitecustomize.py /opt/pacore/sitecustomize.py\n"
        "RUN stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])')"
        " && rm -f $stdlib/sitecustomize.py && cp /opt/pacore/sitecustomize.py $stdlib/sitecustomize.py\n"
        f"RUN chmod 755 /opt/miniconda3/bin/conda && python3 -m venv --copies {VENV}"
        f" && {VENV}/bin/python -m pip install -q --no-index --find-links {WHEELS} --upgrade pip"
        f" && {VENV}/bin/python -m pip install -q --no-index --find-links {WHEELS} -r {WHEELS}/requirements.txt\n"
        f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin VIRTUAL_ENV={VENV}"
        f" PIP_NO_INDEX=1 PIP_FIND_LINKS={WHEELS} PIP_DISABLE_PIP_VERSION_CHECK=1\n"
    )


def _daemon_machine(client: DockerClient) -> str:
    machine = (client.info() or {}).get("Architecture") or "x86_64"
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


# ------------------------------------------------------------------------------------------ instance


def _instance_dockerfile(env_image: str, spec: InstallSpec, row: dict[str, Any]) -> str:
    git_env = " ".join(f"{key}={shlex.quote(value)}" for key, value in GIT_ENV.items())
    env = image_env(spec, row)
    steps = [
        *spec.pre_install,  # before the commit: the base tree is what the fixed steps leave
        f"export {git_env}",
        "git init -q",
        "git add -A -f .",  # every file of the snapshot was tracked upstream, ignored patterns or not
        f"git -c commit.gpgsign=false commit -q -m {shlex.quote('base commit ' + row['base_commit'])}",
        f"git update-ref refs/replace/{row['base_commit']} HEAD",
        spec.install,
        # What the install leaves (build/, *.egg-info) is no part of any patch: excluded from `git add -A`.
        "git status --porcelain --untracked-files=normal | sed -n 's/^?? //p' >> .git/info/exclude",
        "test -z \"$(git status --porcelain)\" || { echo 'the install step changed tracked files:';"
        " git status --porcelain | head -20; exit 1; }",
    ]
    lines = [
        f"FROM {env_image}",
        f"COPY repo {CONTAINER_WORKDIR}",
        f"WORKDIR {CONTAINER_WORKDIR}",
        *([f"ENV {' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())}"] if env else []),
        "RUN set -e; " + "; ".join(steps),
    ]
    return "\n".join(lines) + "\n"
