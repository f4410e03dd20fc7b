"""How each covered repository version of SWE-bench is installed, and which Debian release runs it.

swebench 5 no longer ships its install recipes (its rows name prebuilt conda images instead). The
recipes below follow ``swebench.harness.constants`` of swebench 4.1 (MIT): for each repository
version the Python it used, the packages its environment held (conda's ``packages`` read as PyPI
names, plus the pinned ``pip_packages``), the ``pre_install`` steps and the install command run in
``/testbed``. Only recipes that need nothing but PyPI are here: no conda-only packages, no apt
packages, no compilers. A row of any other repository or version needs the official images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Debian releases by the version of their python3 package.
DEBIAN_PYTHON = {"bullseye": "3.9.2", "bookworm": "3.11.2", "trixie": "3.13.5"}


class UnsupportedRowError(ValueError):
    """The row's repository or version has no offline recipe; the message says which are covered."""


@dataclass(frozen=True)
class InstallSpec:
    """One repository version's environment and install step."""

    python: str
    install: str = "python -m pip install -e ."
    packages: tuple[str, ...] = ()  # PyPI requirement strings in the environment (pins included)
    requirement_files: tuple[str, ...] = ()  # the first of these that exists in the repository is installed
    pre_install: tuple[str, ...] = ()  # shell steps in /testbed before the base commit is recorded
    env: dict[str, str] = field(default_factory=dict)  # image environment ("{version}" is the row's version)

    @property
    def release(self) -> str:
        return debian_release(self.python)


def debian_release(python: str) -> str:
    """The Debian release with the oldest Python whose minor version is not older than ``python``'s."""
    wanted = _version_tuple(python)
    for release, version in sorted(DEBIAN_PYTHON.items(), key=lambda item: _version_tuple(item[1])):
        if _version_tuple(version)[:2] >= wanted[:2]:
            return release
    raise UnsupportedRowError(f"no Debian release here has Python {python} or newer ({DEBIAN_PYTHON})")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# ------------------------------------------------------------------------------------------- recipes

_REQUESTS = InstallSpec(python="3.9", install="python -m pip install .", packages=("pytest",))

_PYTEST_PINS = {
    "4.4": (
        "atomicwrites==1.4.1",
        "attrs==23.1.0",
        "more-itertools==10.1.0",
        "pluggy==0.13.1",
        "py==1.11.0",
        "setuptools==68.0.0",
        "six==1.16.0",
    ),
    "4.5": (
        "atomicwrites==1.4.1",
        "attrs==23.1.0",
        "more-itertools==10.1.0",
        "pluggy==0.11.0",
        "py==1.11.0",
        "setuptools==68.0.0",
        "six==1.16.0",
        "wcwidth==0.2.6",
    ),
    "4.6": (
        "atomicwrites==1.4.1",
        "attrs==23.1.0",
        "more-itertools==10.1.0",
        "packaging==23.1",
        "pluggy==0.13.1",
        "py==1.11.0",
        "six==1.16.0",
        "wcwidth==0.2.6",
    ),
    **dict.fromkeys(
        ("5.0", "5.1", "5.2"),
        (
            "atomicwrites==1.4.1",
            "attrs==23.1.0",
            "more-itertools==10.1.0",
            "packaging==23.1",
            "pluggy==0.13.1",
            "py==1.11.0",
            "wcwidth==0.2.6",
        ),
    ),
    "5.3": (
        "attrs==23.1.0",
        "more-itertools==10.1.0",
        "packaging==23.1",
        "pluggy==0.13.1",
        "py==1.11.0",
        "wcwidth==0.2.6",
    ),
    "5.4": ("py==1.11.0", "packaging==23.1", "attrs==23.1.0", "more-itertools==10.1.0", "pluggy==0.13.1"),
    "6.0": (
        "attrs==23.1.0",
        "iniconfig==2.0.0",
        "more-itertools==10.1.0",
        "packaging==23.1",
        "pluggy==0.13.1",
        "py==1.11.0",
        "toml==0.10.2",
    ),
    **dict.fromkeys(
        ("6.2", "6.3"),
        ("attrs==23.1.0", "iniconfig==2.0.0", "packaging==23.1", "pluggy==0.13.1", "py==1.11.0", "toml==0.10.2"),
    ),
    "7.0": ("attrs==23.1.0", "iniconfig==2.0.0", "packaging==23.1", "pluggy==0.13.1", "py==1.11.0"),
    **dict.fromkeys(
        ("7.1", "7.2"),
        ("attrs==23.1.0", "iniconfig==2.0.0", "packaging==23.1", "pluggy==0.13.1", "py==1.11.0", "tomli==2.0.1"),
    ),
    **dict.fromkeys(
        ("7.4", "8.0", "8.1", "8.2", "8.3", "8.4"),
        ("iniconfig==2.0.0", "packaging==23.1", "pluggy==1.3.0", "exceptiongroup==1.1.3", "tomli==2.0.1"),
    ),
}
# pytest takes its version from git tags (setuptools_scm); the image's repository has none.
_SCM_VERSION = {"SETUPTOOLS_SCM_PRETEND_VERSION": "{version}"}

_FLASK_PINS_2_0 = (
    "setuptools==70.0.0",
    "Werkzeug==2.3.7",
    "Jinja2==3.0.1",
    "itsdangerous==2.1.2",
    "click==8.0.1",
    "MarkupSafe==2.1.3",
)
_FLASK_PINS = (
    "setuptools==70.0.0",
    "click==8.1.3",
    "itsdangerous==2.1.2",
    "Jinja2==3.1.2",
    "MarkupSafe==2.1.1",
    "Werkzeug==2.3.7",
)

_SYMPY = InstallSpec(python="3.9", packages=("mpmath", "flake8", "mpmath==1.3.0", "flake8-comprehensions"))
_SYMPY_NEW = InstallSpec(
    python="3.9", packages=("mpmath==1.3.0",), requirement_files=("requirements-dev.txt", "requirements-test.txt")
)

_SPHINX_SETUP_PINS = (  # swebench's pins for Sphinx 3.0-4.4, whose open-ended requirements no longer install
    "sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py",
    "sed -i 's/sphinxcontrib-applehelp/sphinxcontrib-applehelp<=1.0.7/' setup.py",
    "sed -i 's/sphinxcontrib-devhelp/sphinxcontrib-devhelp<=1.0.5/' setup.py",
    "sed -i 's/sphinxcontrib-qthelp/sphinxcontrib-qthelp<=1.0.6/' setup.py",
    "sed -i 's/alabaster>=0.7,<0.8/alabaster>=0.7,<0.7.12/' setup.py",
    "sed -i \"s/'packaging',/'packaging', 'markupsafe<=2.0.1',/\" setup.py",
)
_SPHINX_HELP_PINS = (
    "sed -i 's/sphinxcontrib-htmlhelp/sphinxcontrib-htmlhelp<=2.0.4/' setup.py",
    "sed -i 's/sphinxcontrib-serializinghtml/sphinxcontrib-serializinghtml<=1.1.9/' setup.py",
)
_SPHINX_HELP_PINS_4_2 = (
    "sed -i 's/sphinxcontrib-htmlhelp>=2.0.0/sphinxcontrib-htmlhelp>=2.0.0,<=2.0.4/' setup.py",
    "sed -i 's/sphinxcontrib-serializinghtml>=1.1.5/sphinxcontrib-serializinghtml>=1.1.5,<=1.1.9/' setup.py",
)
_SPHINX_HELP_PINS_4_1 = (
    "grep -q 'sphinxcontrib-htmlhelp>=2.0.0' setup.py && "
    "sed -i 's/sphinxcontrib-htmlhelp>=2.0.0/sphinxcontrib-htmlhelp>=2.0.0,<=2.0.4/' setup.py || "
    "sed -i 's/sphinxcontrib-htmlhelp/sphinxcontrib-htmlhelp<=2.0.4/' setup.py",
    "grep -q 'sphinxcontrib-serializinghtml>=1.1.5' setup.py && "
    "sed -i 's/sphinxcontrib-serializinghtml>=1.1.5/sphinxcontrib-serializinghtml>=1.1.5,<=1.1.9/' setup.py || "
    "sed -i 's/sphinxcontrib-serializinghtml/sphinxcontrib-serializinghtml<=1.1.9/' setup.py",
)


def _sphinx(version: str) -> InstallSpec:
    steps = ["sed -i 's/pytest/pytest -rA/' tox.ini"]
    if version in ("3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "4.0", "4.1", "4.2", "4.3", "4.4"):
        steps += _SPHINX_SETUP_PINS
        steps += {
            "4.1": _SPHINX_HELP_PINS_4_1,
            "4.2": _SPHINX_HELP_PINS_4_2,
            "4.3": _SPHINX_HELP_PINS_4_2,
            "4.4": _SPHINX_HELP_PINS_4_2,
        }.get(version, _SPHINX_HELP_PINS)
    # docutils<0.22 is ours, not swebench's: 0.22 (2025) dropped docutils.utils.roman, which Sphinx imports; an
    # index with upload times gets the same from the 2024 cut-off (offline_images.PYPI_BEFORE), others do not.
    return InstallSpec(
        python="3.9",
        install="python -m pip install -e .[test]",
        packages=("tox==4.16.0", "tox-current-env==0.0.11", "Jinja2==3.0.3", "docutils<0.22"),
        pre_install=tuple(steps),
    )


_PYLINT = InstallSpec(python="3.9", requirement_files=("requirements_test.txt",))
_PYLINT_3 = InstallSpec(
    python="3.9", requirement_files=("requirements_test.txt",), packages=("astroid==3.0.0a6", "setuptools")
)

RECIPES: dict[str, dict[str, InstallSpec]] = {
    "psf/requests": dict.fromkeys(
        [
            "0.7",
            "0.8",
            "0.9",
            "0.11",
            "0.13",
            "0.14",
            "1.1",
            "1.2",
            "2.0",
            "2.2",
            "2.3",
            "2.4",
            "2.5",
            "2.7",
            "2.8",
            "2.9",
            "2.10",
            "2.11",
            "2.12",
            "2.17",
            "2.18",
            "2.19",
            "2.22",
            "2.25",
            "2.26",
            "2.27",
            "2.31",
            "3.0",
        ],
        _REQUESTS,
    ),
    "pytest-dev/pytest": {
        version: InstallSpec(
            python="3.9",
            packages=pins,
            pre_install=("sed -i 's/>=>=/>=/' setup.cfg",) if version == "6.3" else (),
            env=_SCM_VERSION,
        )
        for version, pins in _PYTEST_PINS.items()
    },
    "sympy/sympy": {
        **dict.fromkeys(
            ["0.7", "1.0", "1.1", "1.2", "1.4", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10", "1.11", "1.12"], _SYMPY
        ),
        **dict.fromkeys(["1.13", "1.14"], _SYMPY_NEW),
    },
    # Versions 7.2 and later install graphviz with apt: not covered.
    "sphinx-doc/sphinx": {
        version: _sphinx(version)
        for version in [
            "1.5",
            "1.6",
            "1.7",
            "1.8",
            "2.0",
            "2.1",
            "2.2",
            "2.3",
            "2.4",
            "3.0",
            "3.1",
            "3.2",
            "3.3",
            "3.4",
            "3.5",
            "4.0",
            "4.1",
            "4.2",
            "4.3",
            "4.4",
            "4.5",
            "5.0",
            "5.1",
            "5.2",
            "5.3",
            "6.0",
            "6.2",
            "7.0",
            "7.1",
        ]
    },
    # Version 2.8 installs enchant with apt: not covered.
    "pylint-dev/pylint": {
        **dict.fromkeys(["2.9", "2.10", "2.11", "2.13", "2.14", "2.15", "2.16", "2.17"], _PYLINT),
        **dict.fromkeys(["3.0", "3.1", "3.2", "3.3", "4.0"], _PYLINT_3),
    },
    "pallets/flask": {
        "2.0": InstallSpec(python="3.9", packages=_FLASK_PINS_2_0, requirement_files=("requirements/dev.txt",)),
        "2.1": InstallSpec(python="3.10", packages=_FLASK_PINS, requirement_files=("requirements/dev.txt",)),
        **dict.fromkeys(
            ["2.2", "2.3", "3.0", "3.1"],
            InstallSpec(python="3.11", packages=_FLASK_PINS, requirement_files=("requirements/dev.txt",)),
        ),
    },
}


def spec_for(row: dict[str, Any]) -> InstallSpec:
    """The recipe of the row's repository version, or a clear error naming what is covered."""
    repo, version = str(row.get("repo")), str(row.get("version"))
    versions = RECIPES.get(repo)
    if versions is None:
        raise UnsupportedRowError(
            f"{row.get('instance_id')}: no offline recipe for {repo} (covered: {', '.join(sorted(RECIPES))}); "
            "use the official SWE-bench image on a Docker host with internet"
        )
    if version not in versions:
        raise UnsupportedRowError(
            f"{row.get('instance_id')}: no offline recipe for {repo} version {version} "
            f"(covered: {', '.join(versions)}); use the official SWE-bench image"
        )
    return versions[version]


def image_env(spec: InstallSpec, row: dict[str, Any]) -> dict[str, str]:
    return {key: value.replace("{version}", str(row["version"])) for key, value in spec.env.items()}
