"""The one small interface every repair episode runs against, whatever isolates it.

An episode needs three things from its environment: run a shell command in the repository, read the
patch it produced (``git diff`` against the base commit), and go away afterwards. Docker (the default,
safe) and a local temporary copy (trusted development only) both provide exactly that.

The patch never passes through the command runner, whose output is capped: the diff is written to a
file in the sandbox, read back whole, and checked with ``git apply --check`` against the base commit
before anyone may write it as a prediction.
"""

from __future__ import annotations

import re
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

PATCH_FILE = "pacore-episode.patch"
CHECKED_PATCH_FILE = "pacore-checked.patch"


class CommandResult(BaseModel):
    """What one shell command did: exit status, stdout and stderr merged, and whether it was cut off."""

    exit_code: int
    output: str
    timed_out: bool


@runtime_checkable
class Sandbox(Protocol):
    workdir: str

    def run(self, command: str, timeout: float = 120) -> CommandResult: ...

    def diff(self) -> str: ...

    def close(self) -> None: ...


class SandboxError(RuntimeError):
    """A sandbox could not be opened or used; the message says what to do."""


class BaseSandbox:
    """Shared behaviour: context manager and the diff recipe; subclasses run commands and move files."""

    workdir: str
    base_commit: str
    scratch: str  # a folder in the sandbox, outside the repository, for the diff's files

    def run(self, command: str, timeout: float = 120) -> CommandResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def read_file(self, path: str) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def write_file(self, path: str, content: str | bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def diff(self) -> str:
        """Text changes against the base commit, new untracked files included, binary files left out.

        Everything is staged into a throw-away index, so the agent's own index and commits are not
        disturbed and committed work still counts (the diff is against the base commit, not HEAD).
        Raises SandboxError when the diff cannot be made or does not apply to the base commit.
        """
        patch_file = f"{self.scratch}/{PATCH_FILE}"
        script = (
            "set -e; export GIT_INDEX_FILE=$(mktemp -u); trap 'rm -f $GIT_INDEX_FILE' EXIT; "
            "git read-tree HEAD; git add -A -- . "
            "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/.pytest_cache/**' ':(exclude,glob)**/*.pyc' "
            ">/dev/null 2>&1; "
            f"git -c core.fileMode=false diff --cached --no-color --no-ext-diff {self.base_commit} > {patch_file}"
        )
        result = self.run(script, timeout=120)
        if result.exit_code != 0:
            raise SandboxError(f"git diff failed in the sandbox ({result.exit_code}): {result.output[-2000:]}")
        patch = text_only_diff(self.read_file(patch_file))
        if patch:
            self.check_applies(patch)
        return patch

    def check_applies(self, patch: str) -> None:
        """Raise SandboxError unless ``git apply`` takes ``patch`` on the base commit's tree."""
        checked = f"{self.scratch}/{CHECKED_PATCH_FILE}"
        self.write_file(checked, patch)
        script = (
            "export GIT_INDEX_FILE=$(mktemp -u); trap 'rm -f $GIT_INDEX_FILE' EXIT; "
            f"git read-tree {self.base_commit} && git apply --check --cached {checked}"
        )
        result = self.run(script, timeout=120)
        if result.exit_code != 0:
            raise SandboxError(f"the episode's diff does not apply to the base commit: {result.output[-2000:]}")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


_SECTION = re.compile(rb"^diff --git ", re.M)


def text_only_diff(diff: bytes) -> str:
    """Keep the sections of text files: `git apply` cannot apply binary ones without full blobs, and a
    prediction is JSON text (sections that are not UTF-8 are left out too)."""
    starts = [match.start() for match in _SECTION.finditer(diff)]
    ends = [*starts[1:], len(diff)] if starts else []
    kept = []
    for start, end in zip(starts, ends, strict=True):
        section = diff[start:end]
        if b"\nBinary files " in section or b"\nGIT binary patch" in section:
            continue
        try:
            kept.append(section.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    text = "".join(kept)
    return text if not text or text.endswith("\n") else text + "\n"


def open_sandbox(
    row: dict,
    runtime: Literal["docker", "local"] = "docker",
    *,
    memory: str = "2g",
    pids: int = 256,
    cpus: float = 1.0,
    disk: str = "4g",
) -> BaseSandbox:
    """Open a fresh sandbox on the row's repository at its base commit (use it as a context manager)."""
    if runtime == "docker":
        from pacore_agents.swe.docker_sandbox import DockerSandbox

        return DockerSandbox(row, memory=memory, pids=pids, cpus=cpus, disk=disk)
    if runtime == "local":
        from pacore_agents.swe.local_sandbox import LocalSandbox

        return LocalSandbox(row)
    raise SandboxError(f"unknown sandbox runtime {runtime!r}: use 'docker' or 'local'")
