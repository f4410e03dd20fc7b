"""An episode's sandbox on a SWE-ReX server: a pre-started ``remote`` one, or one a service made.

Only commands travel: the agent loop stays in pacore's process, and each model command goes to the server
as one ``execute`` under the supervisor of :mod:`supervisor` (output bounded, every file capped, nothing it
starts outlives it). pacore's own commands (the diff, the applicability check) are plain ``bash -c``
scripts sent after the supervisor has ended everything the model started, their whole output streamed
back in base64. A ``remote`` server is reused: when a sandbox opens on it, the repository is reset to the
base commit (tracked files restored, new files removed, ignored files that the server's first sandbox did
not find removed too) and every process of an earlier episode is gone (its supervisor ended them).

What a server cannot be told by pacore (its memory, process and CPU caps, a disk quota) is whatever its
container was started with: docs/swe-sandboxes.md says how to start one capped.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pacore_agents.swe.rex_http import HostUnreachable, TokenRefused
from pacore_agents.swe.rex_images import REX_PYTHON
from pacore_agents.swe.sandbox import MAX_OUTPUT_BYTES, BaseSandbox, CommandResult, SandboxError, SystemResult
from pacore_agents.swe.supervisor import (
    command_result,
    ended_notes,
    read_report,
    supervised,
    system_command,
    system_result,
)

log = logging.getLogger(__name__)

MAX_LOG_BYTES = 1_000_000_000  # a command streamed to a file (evaluation logs) is kept up to this
# The server's own interpreter (the supervisor runs on it: pacore's in the images it builds, else the one the
# server runs on) and a scratch folder, on a tmpfs where there is one.
_PROBE = (
    f'p={REX_PYTHON}; [ -x "$p" ] || p=$(readlink -f /proc/$PPID/exe); echo "$p"; '
    'for d in /dev/shm /run /tmp; do s="$d/pacore-$1"; '
    'if mkdir -p "$s" 2>/dev/null && [ -w "$s" ]; then chmod 700 "$s"; echo "$s"; exit 0; fi; done; exit 1'
)
# Back to the base commit: tracked files, the index and HEAD's branch as at the base; untracked files gone;
# ignored files gone too unless the server's first sandbox found them (an install's build/ and egg-info).
RESET = r"""
set -e
git reset -q --hard {base}
git clean -q -f -d
git clean -n -d -X -z | tr '\0' '\n' | sed -n 's/^Would remove //p' | sort > "$PACORE_SCRATCH/ignored-now"
if [ -f "{baseline}" ]; then
    comm -23 "$PACORE_SCRATCH/ignored-now" "{baseline}" | while IFS= read -r f; do rm -rf -- "$f"; done
else
    cp "$PACORE_SCRATCH/ignored-now" "{baseline}"
fi
git stash clear
"""


class HostLost(SandboxError):
    """The sandbox's host stopped answering: the episode starts again on another host."""

    def __init__(self, host: str, reason: str):
        super().__init__(f"host {host} stopped answering: {reason}")
        self.host, self.reason = host, reason


class Transport(Protocol):
    """SWE-ReX's API as the sandbox uses it (see :class:`~pacore_agents.swe.rex_http.RexConnection`)."""

    where: str

    def call(self, endpoint: str, payload: dict[str, Any] | None, *, timeout: float) -> dict[str, Any]: ...

    def close(self) -> None: ...


class RexSandbox(BaseSandbox):
    """A sandbox on one SWE-ReX server; ``on_close`` hands the server back (the placement's slot)."""

    def __init__(
        self,
        row: dict[str, Any],
        transport: Transport,
        *,
        host: str,
        workdir: str = "/testbed",
        fsize: int = 0,
        reset: bool = False,
        on_close: Callable[[RexSandbox], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
    ):
        super().__init__()
        self.instance_id = row["instance_id"]
        self.base_commit = row["base_commit"]
        self.workdir = workdir
        self.host = host
        self.transport = transport
        self.fsize = fsize
        self.mark = uuid.uuid4().hex
        self._closed = False
        self._on_close = on_close
        self._on_lost = on_lost
        try:
            answer = self._call("execute", {"command": ["sh", "-c", _PROBE, "probe", self.mark], "timeout": 60})
            lines = answer.get("stdout", "").split()
            if answer.get("exit_code") != 0 or len(lines) != 2:
                raise SandboxError(f"{transport.where}: no scratch folder could be made ({answer})")
            self.python, self.scratch = lines
            if reset:
                self.reset()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------ the wire

    def _call(self, endpoint: str, payload: dict[str, Any] | None, timeout: float = 120) -> dict[str, Any]:
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")
        try:
            return self.transport.call(endpoint, payload, timeout=timeout)
        except (HostUnreachable, TokenRefused) as exc:
            if self._on_lost is not None:
                self._on_lost(str(exc))
            raise HostLost(self.host, str(exc)) from None

    def reset(self) -> None:
        """The repository back at the base commit, as a fresh container would have it."""
        baseline = f"/var/tmp/pacore-ignored-{self.base_commit[:40]}"
        done = self.system(RESET.format(base=self.base_commit, baseline=baseline), timeout=300)
        if done.exit_code != 0:
            raise SandboxError(
                f"{self.transport.where}: resetting {self.workdir} to {self.base_commit} failed: "
                f"{done.stderr.decode(errors='replace')[-1500:]}"
            )

    # ------------------------------------------------------------------------------------------ commands

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -lc` in the repository under the supervisor: output capped (head and tail kept), killed after
        ``timeout`` seconds, every file capped, and whatever it left running ended."""
        return self._supervised(command, timeout)[0]

    def _supervised(
        self, command: str, timeout: float, *, limit: int | None = None, keep: str = "ends"
    ) -> tuple[CommandResult, dict[str, Any]]:
        payload = supervised(
            self.python,
            command,
            cwd=self.workdir,
            timeout=timeout,
            mark=self.mark,
            fsize=self.fsize,
            keep=keep,
            limit=limit or MAX_OUTPUT_BYTES,
        )
        report = read_report(self._call("execute", payload, timeout=payload["timeout"] + 10))
        if report.get("lost"):  # the command killed its supervisor: a supervised `true` ends what carries the mark
            sweep = supervised(self.python, "true", cwd=self.workdir, timeout=30, mark=self.mark, login=False)
            report["ended"] = read_report(self._call("execute", sweep, timeout=sweep["timeout"] + 10)).get("ended", 0)
        notes = ended_notes(report)
        self.notes += notes
        return command_result(report, notes), report

    def run_to_file(self, command: str, path: Path, timeout: float, limit: int = MAX_LOG_BYTES) -> CommandResult:
        """Like :meth:`run`, but the output (its first ``limit`` bytes) goes to ``path``; the result's is empty."""
        result, report = self._supervised(command, timeout, limit=limit, keep="head")
        text = result.output
        if report.get("dropped"):
            text += f"\n[pacore: output cap of {limit} bytes reached; the last {report['dropped']} bytes not kept]\n"
        path.write_text(text)
        return CommandResult(exit_code=result.exit_code, output="", timed_out=result.timed_out, notes=result.notes)

    def system(self, script: str, *, stdin: bytes | None = None, timeout: float = 600) -> SystemResult:
        stdin_file = None
        if stdin is not None:
            stdin_file = f"{self.scratch}/stdin.b64"
            self._call("write_file", {"path": stdin_file, "content": base64.b64encode(stdin).decode()})
        payload = system_command(script, cwd=self.workdir, scratch=self.scratch, stdin_file=stdin_file, timeout=timeout)
        return system_result(self._call("execute", payload, timeout=payload["timeout"] + 10))

    # ------------------------------------------------------------------------------------------ files

    def read_file(self, path: str) -> bytes:
        done = self.system(f'base64 -w0 -- "{path}" | base64 -d', timeout=300)
        if done.exit_code != 0:
            raise SandboxError(f"could not read {path} from the sandbox of {self.instance_id}: {done.stderr!r}")
        return done.stdout

    def write_file(self, path: str, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else content
        done = self.system(f'mkdir -p -- "$(dirname -- "{path}")" && cat > "{path}"', stdin=data, timeout=300)
        if done.exit_code != 0:
            raise SandboxError(f"could not write {path} into the sandbox of {self.instance_id}: {done.stderr!r}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            self._on_close(self)
