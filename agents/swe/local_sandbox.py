"""UNSAFE: episodes as plain subprocesses in a temporary copy of the repository, for trusted development.

Model commands run on this host as your user, with your network: they can read whatever you can, your
files and your other processes' environments included (``/proc/PID/environ``; pacore's own, API keys
and all). Only use it with models and tasks you trust; use the docker runtime otherwise. It exists
because Docker is not always at hand while developing an agent. The copy comes from a local task's
folder, or for SWE-bench rows from a clone found under ``$PACORE_SWE_REPOS`` (``owner__name`` folders),
checked out at the base commit.

Why not hide pacore's environment: a command running as you can read it through ``/proc`` whatever the
command's own environment holds, and it can read the files the keys came from (``.env``, shell profiles)
just as well; hiding one copy would suggest a safety the runtime does not have. What it does hold:

* commands get a short allow-list of variables (``PATH``, ``HOME``, the locale; no API keys) in a
  non-login ``bash -c``, so a command that prints its environment into a log does not leak them;
* nothing a command starts outlives it: each command runs under the supervisor of the SWE-ReX runtime
  (:mod:`supervisor`), which adopts every process it leaves (Linux's child subreaper), so jobs started with
  ``setsid``, ``nohup`` or ``&`` end with their command; it ends them all if pacore dies (a parent-death
  signal), and every process carries its sandbox's mark (``PACORE_SANDBOX``) in its environment, by which
  the sandbox, or the next run's sweep after a SIGKILL (:func:`sweep_local_orphans`), ends what escaped;
* the temporary copy is removed when the sandbox closes, or by the next run's sweep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pacore_agents.swe.images import commit_repo, copy_repo
from pacore_agents.swe.owners import owner_is_dead, owner_labels
from pacore_agents.swe.sandbox import BaseSandbox, CommandResult, SandboxError, SystemResult
from pacore_agents.swe.supervisor import MARK, command_result, ended_notes, read_report, supervised

KEPT_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "VIRTUAL_ENV",
    "PYENV_ROOT",
    "PYENV_VERSION",
)
KEPT_PREFIXES = ("LC_",)
PREFIX = "pacore-local-"
OWNER_FILE = "owner.json"


class UnsafeRuntimeWarning(UserWarning):
    """The local runtime runs model commands on the host, without isolation."""


class LocalSandbox(BaseSandbox):
    def __init__(self, row: dict[str, Any]):
        super().__init__()
        warnings.warn(
            "runtime 'local' runs model commands directly on this host as your user (no isolation, network on; "
            "they can read your files and pacore's environment): use it only for trusted development; use the "
            "docker runtime otherwise",
            UnsafeRuntimeWarning,
            stacklevel=3,
        )
        self.instance_id = row["instance_id"]
        self._tmp = tempfile.mkdtemp(prefix=f"{PREFIX}{self.instance_id[:40].replace('/', '_')}-")
        self._closed = False
        self.workdir = os.path.join(self._tmp, "repo")
        self.scratch = os.path.join(self._tmp, "scratch")
        try:
            Path(self._tmp, OWNER_FILE).write_text(json.dumps(owner_labels()))  # for the next run's sweep
            os.mkdir(self.scratch)
            self.base_commit = self._materialise(row, Path(self.workdir))
        except BaseException:
            self.close()
            raise

    def _materialise(self, row: dict[str, Any], target: Path) -> str:
        if row.get("pacore_task_dir"):
            target.mkdir()
            copy_repo(Path(row["pacore_task_dir"]) / "repo", target)
            head = commit_repo(target)
            if head != row["base_commit"]:
                raise SandboxError(f"{self.instance_id}: local copy commits to {head}, row says {row['base_commit']}")
            return head
        repos = os.environ.get("PACORE_SWE_REPOS")
        source = Path(repos) / row["repo"].replace("/", "__") if repos else None
        if source is None or not (source / ".git").exists():
            raise SandboxError(
                f"runtime 'local' needs a clone of {row['repo']} for {self.instance_id}: set PACORE_SWE_REPOS "
                f"to a folder holding {row['repo'].replace('/', '__')}/ (a git clone), or use the docker runtime"
            )
        for args in (
            ["clone", "-q", "--shared", str(source), str(target)],
            ["-C", str(target), "checkout", "-q", row["base_commit"]],
        ):
            done = subprocess.run(["git", *args], capture_output=True, text=True)
            if done.returncode != 0:
                raise SandboxError(f"git {args[0]} failed for {self.instance_id}: {done.stderr.strip()}")
        return str(row["base_commit"])

    def environment(self) -> dict[str, str]:
        """What a command sees: the allow-listed variables of this process, temporary files in the sandbox,
        and the sandbox's mark."""
        kept = {
            key: value for key, value in os.environ.items() if key in KEPT_VARIABLES or key.startswith(KEPT_PREFIXES)
        }
        return {"PATH": os.defpath, **kept, "TMPDIR": self.scratch, "PYTHONDONTWRITEBYTECODE": "1", MARK: self._tmp}

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -c` in the copy under the supervisor (:mod:`supervisor`), stdout and stderr merged, output capped
        (head and tail kept), killed after ``timeout`` seconds; everything it started is ended when it ends, and
        when pacore dies."""
        self._check_open()
        payload = supervised(
            sys.executable, command, cwd=self.workdir, timeout=timeout, mark=self._tmp, login=False, parent=os.getpid()
        )
        process = subprocess.Popen(
            payload["command"],
            cwd=self.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=self.environment(),
        )
        try:
            stdout, stderr = process.communicate(timeout=payload["timeout"])
        except subprocess.TimeoutExpired:  # the supervisor itself hung: stop it and its group
            _stop(process)
            stdout, stderr = process.communicate()
        answer = {"stdout": stdout.decode(errors="replace"), "stderr": stderr.decode(errors="replace")}
        report = read_report({**answer, "exit_code": process.returncode})
        report["ended"] = report.get("ended", 0) + end_marked(self._tmp)  # what got away from a killed supervisor
        notes = ended_notes(report)
        self.notes += notes
        return command_result(report, notes)

    def system(self, script: str, *, stdin: bytes | None = None, timeout: float = 600) -> SystemResult:
        self._check_open()
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.workdir,
            input=stdin or b"",
            capture_output=True,
            env={**self.environment(), "PACORE_SCRATCH": self.scratch},
            timeout=timeout,
        )
        return SystemResult(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")

    def read_file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_file(self, path: str, content: str | bytes) -> None:
        Path(path).write_bytes(content.encode() if isinstance(content, str) else content)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        end_marked(self._tmp)
        shutil.rmtree(self._tmp, ignore_errors=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The supervisor ends what it adopted on SIGTERM; the process group gets SIGKILL after a grace period."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=3)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 3
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.wait()


def end_marked(sandbox_dir: str) -> int:
    """SIGKILL every process (that this user may signal) whose environment carries the sandbox's mark,
    until none is left; returns how many there were."""
    mark = f"\0{MARK}={sandbox_dir}\0".encode()
    first = None
    for _ in range(50):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:  # gone, or another user's
                continue
            if mark in b"\0" + environ:
                found.append(int(entry))
        if first is None:
            first = len(found)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return first or 0


def sweep_local_orphans(*, log: Callable[[str], None] = print) -> int:
    """End the processes and remove the copies of local sandboxes whose pacore certainly died (a SIGKILL
    leaves both); say and return how many. Sandboxes of live runs, or of other machines, are left alone."""
    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            labels = json.loads((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being made
        if not owner_is_dead(labels):
            continue
        end_marked(str(folder))
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    if removed:
        log(f"removed {removed} local sandbox(es) left by a killed run, and ended their processes")
    return removed
