"""The one small interface every repair episode runs against, whatever isolates it.

An episode needs three things from its environment: run a shell command in the repository, read the
patch it produced (``git diff`` against the base commit), and go away afterwards. Docker (the default,
safe) and a local temporary copy (trusted development only) both provide exactly that.

Two kinds of command run in a sandbox. The model's commands (:meth:`run`) run under the sandbox's caps,
their output bounded, and nothing they start outlives them. pacore's own commands (:meth:`system`: the
diff, the applicability check) run after the model's command has been ended, in ``bash -c`` (no login
profile the model could have edited), outside the caps' watchers, with their whole output streamed back:
so the patch never passes through the capped command runner, and no command can starve it. The diff
writes nothing into the repository (a throw-away index on the sandbox's scratch space, new files only
noted with ``git add -N``), and it is checked with ``git apply --check`` against the base commit before
anyone may write it as a prediction.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Protocol, Self, runtime_checkable

from pydantic import BaseModel

MAX_OUTPUT_BYTES = 4_000_000  # of a model's command, kept as head + tail; the agent cuts further for the model
MAX_PATCH_FILE_BYTES = 32 * 2**20  # a file bigger than this (a log, a disk filler) is left out of the patch
# Kept out of the patch: caches a test run leaves behind.
PATCH_EXCLUDES = "':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/.pytest_cache/**' ':(exclude,glob)**/*.pyc'"


class CommandResult(BaseModel):
    """What one shell command did: exit status, stdout and stderr merged, and whether it was cut off.

    ``output_bytes``: how much the command printed in all, when ``output`` holds only its head and tail
    (None: ``output`` is whole). ``notes``: what the sandbox did about the command (processes it left
    running stopped, files past the disk cap removed); they end ``output`` too, so the model reads them.
    """

    exit_code: int
    output: str
    timed_out: bool
    output_bytes: int | None = None
    notes: list[str] = []


class SystemResult(BaseModel):
    """What one of pacore's own commands did: exit status, and its whole stdout and stderr, apart."""

    exit_code: int
    stdout: bytes
    stderr: bytes


@runtime_checkable
class Sandbox(Protocol):
    workdir: str

    def run(self, command: str, timeout: float = 120) -> CommandResult: ...

    def diff(self) -> str: ...

    def close(self) -> None: ...


class SandboxError(RuntimeError):
    """A sandbox could not be opened or used; the message says what to do."""


# Builds a throw-away index from HEAD, marks new files with `git add -N` (no blob is written), and diffs the
# base commit against the work tree. Files over the size limit are left out, and named on stderr.
_DIFF_SCRIPT = r"""
set -e
find "$PACORE_SCRATCH" -mindepth 1 -delete 2>/dev/null || true  # room for the index, whatever was left there
export GIT_INDEX_FILE="$PACORE_SCRATCH/diff-index"
excludes=({excludes})
while IFS= read -r -d '' entry; do
    excludes+=(":(exclude,literal)${{entry#* }}")
    printf 'pacore-left-out %s\n' "$entry" >&2
done < <(find . -path ./.git -prune -o -type f -size +{limit}c -printf '%s %P\0')
git read-tree HEAD
git add -A -N -- . "${{excludes[@]}}" >/dev/null
git -c core.fileMode=false -c core.quotePath=false diff --no-color --no-ext-diff {base} -- . "${{excludes[@]}}"
rm -f "$GIT_INDEX_FILE"
"""
_CHECK_SCRIPT = r"""
export GIT_INDEX_FILE="$PACORE_SCRATCH/check-index"
rm -f "$GIT_INDEX_FILE" "$GIT_INDEX_FILE.lock"
git read-tree {base} && git apply --check --cached -
status=$?
rm -f "$GIT_INDEX_FILE"
exit $status
"""


class BaseSandbox:
    """Shared behaviour: context manager, the diff recipe and the notes; subclasses run commands."""

    workdir: str
    base_commit: str
    scratch: str  # a folder in the sandbox, outside the repository, for pacore's own files
    host: str = "local"  # where it runs, as an episode's record names it

    def __init__(self) -> None:
        self.notes: list[str] = []  # what the sandbox stopped or removed, over the whole episode

    def run(self, command: str, timeout: float = 120) -> CommandResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def system(self, script: str, *, stdin: bytes | None = None, timeout: float = 600) -> SystemResult:
        """Run one of pacore's own bash scripts in the repository (``$PACORE_SCRATCH`` is the scratch
        folder), after whatever the model started has ended."""
        raise NotImplementedError  # pragma: no cover - abstract

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def run_to_file(self, command: str, path: Path, timeout: float, limit: int = 1_000_000_000) -> CommandResult:
        """Like :meth:`run`, the output (up to ``limit`` bytes) to ``path`` (evaluation logs)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def write_file(self, path: str, content: str | bytes) -> None:
        raise NotImplementedError  # pragma: no cover - abstract

    def diff(self) -> str:
        """Text changes against the base commit, new untracked files included, binary files left out.

        Built in a throw-away index, so the agent's own index and commits are not disturbed and committed
        work still counts (the diff is against the base commit, not HEAD). Files bigger than
        ``MAX_PATCH_FILE_BYTES`` are left out and noted. Raises SandboxError when the diff cannot be made
        or does not apply to the base commit.
        """
        script = _DIFF_SCRIPT.format(excludes=PATCH_EXCLUDES, limit=MAX_PATCH_FILE_BYTES, base=self.base_commit)
        result = self.system(script)
        errors = result.stderr.decode("utf-8", errors="replace")
        left_out = [
            line.removeprefix("pacore-left-out ").split(" ", 1)
            for line in errors.splitlines()
            if line.startswith("pacore-left-out ")
        ]
        if result.exit_code != 0:
            raise SandboxError(f"git diff failed in the sandbox ({result.exit_code}): {errors[-2000:]}")
        if left_out:
            files = ", ".join(f"{path} ({int(size) / 2**20:.0f} MiB)" for size, path in left_out[:10])
            self.notes.append(f"left out of the patch, bigger than {MAX_PATCH_FILE_BYTES // 2**20} MiB: {files}")
        patch = text_only_diff(result.stdout)
        if patch:
            self.check_applies(patch)
        return patch

    def check_applies(self, patch: str) -> None:
        """Raise SandboxError unless ``git apply`` takes ``patch`` on the base commit's tree."""
        result = self.system(_CHECK_SCRIPT.format(base=self.base_commit), stdin=patch.encode())
        if result.exit_code != 0:
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
            raise SandboxError(f"the episode's diff does not apply to the base commit: {output[-2000:]}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class BoundedOutput:
    """Keeps the first and last ``limit / 2`` bytes of a stream and counts the whole, so a flood cannot
    exhaust memory and the marker can say how much the command really printed."""

    def __init__(self, limit: int = MAX_OUTPUT_BYTES):
        self.limit = limit
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.half
            if excess > 0:
                del self.tail[:excess]
                self.dropped += excess

    @property
    def cut(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        middle = (
            f"\n[... {self.dropped} bytes cut here: the command printed {self.total} bytes; a command's output "
            f"is capped at {self.limit} bytes, its first and last halves kept ...]\n".encode()
            if self.dropped
            else b""
        )
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")

    def result(self, exit_code: int, timed_out: bool, notes: list[str]) -> CommandResult:
        """The command's result; its notes end the output, one bracketed line each."""
        text = self.text() + "".join(f"\n[pacore: {note}]\n" for note in notes)
        return CommandResult(
            exit_code=exit_code,
            output=text,
            timed_out=timed_out,
            output_bytes=self.total if self.cut else None,
            notes=notes,
        )


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
    row: dict[str, Any],
    runtime: Literal["docker", "local", "swerex"] = "docker",
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
    if runtime == "swerex":
        raise SandboxError("runtime 'swerex' opens sandboxes through its hosts: HostPool(load_hosts(FILE)).open")
    raise SandboxError(f"unknown sandbox runtime {runtime!r}: use 'docker', 'local' or 'swerex'")
