"""The one small interface every repair episode runs against, whatever isolates it.

An episode needs three things from its environment: run a shell command in the repository, read the
patch it produced (``git diff`` against the base commit), and go away afterwards. Docker (the default,
safe) and a local temporary copy (trusted development only) both provide exactly that.
"""

from __future__ import annotations

import asyncio
import re
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel


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
    """Shared behaviour: context manager, async wrapper and the diff recipe."""

    workdir: str
    base_commit: str

    def run(self, command: str, timeout: float = 120) -> CommandResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def arun(self, command: str, timeout: float = 120) -> CommandResult:
        """`run` off the event loop, so concurrent episodes do not block each other."""
        return await asyncio.to_thread(self.run, command, timeout)

    def diff(self) -> str:
        """Text changes against the base commit, new untracked files included, binary files left out.

        Everything is staged into a throw-away index, so the agent's own index and commits are not
        disturbed and committed work still counts (the diff is against the base commit, not HEAD).
        """
        script = (
            "set -e; export GIT_INDEX_FILE=$(mktemp -u); trap 'rm -f $GIT_INDEX_FILE' EXIT; "
            "git read-tree HEAD; git add -A -- . "
            "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/.pytest_cache/**' ':(exclude,glob)**/*.pyc' "
            ">/dev/null 2>&1; "
            "err=$(mktemp); "  # stderr kept apart: a warning inside the diff would corrupt it
            f"git -c core.fileMode=false diff --cached --no-color --no-ext-diff {self.base_commit} 2>$err "
            "|| { cat $err; exit 1; }"
        )
        result = self.run(script, timeout=120)
        if result.exit_code != 0:
            raise SandboxError(f"git diff failed in the sandbox ({result.exit_code}): {result.output[-2000:]}")
        return text_only_diff(result.output)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


_SECTION = re.compile(r"^diff --git ", re.M)


def text_only_diff(diff: str) -> str:
    """Drop the sections of binary files: `git apply` cannot apply them without full blobs."""
    starts = [match.start() for match in _SECTION.finditer(diff)]
    ends = [*starts[1:], len(diff)] if starts else []
    sections = [diff[start:end] for start, end in zip(starts, ends, strict=True)]
    kept = [s for s in sections if "\nBinary files " not in s and "\nGIT binary patch" not in s]
    text = "".join(kept)
    return text if not text or text.endswith("\n") else text + "\n"


def open_sandbox(
    row: dict,
    runtime: Literal["docker", "local"] = "docker",
    *,
    memory: str = "2g",
    pids: int = 256,
    cpus: float = 1.0,
) -> BaseSandbox:
    """Open a fresh sandbox on the row's repository at its base commit (use it as a context manager)."""
    if runtime == "docker":
        from pacore_agents.swe.docker_sandbox import DockerSandbox

        return DockerSandbox(row, memory=memory, pids=pids, cpus=cpus)
    if runtime == "local":
        from pacore_agents.swe.local_sandbox import LocalSandbox

        return LocalSandbox(row)
    raise SandboxError(f"unknown sandbox runtime {runtime!r}: use 'docker' or 'local'")
