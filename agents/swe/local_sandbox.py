"""UNSAFE: episodes as plain subprocesses in a temporary copy of the repository, for trusted development.

Model commands run on this host with your user's rights and network; only use it with models and
tasks you trust. It exists because Docker is not always at hand while developing an agent. The copy
comes from a local task's folder, or for SWE-bench rows from a clone found under
``$PACORE_SWE_REPOS`` (``owner__name`` folders), checked out at the base commit.

What it does hold: commands see a scrubbed environment (a short allow-list of this process's
variables such as ``PATH``, ``HOME`` and the locale; no API keys or other secrets) in a non-login
``bash -c``, so no profile script puts them back; and each command runs under a small supervisor
that adopts every process it leaves (Linux's child subreaper), so jobs started with ``setsid``,
``nohup`` or ``&`` end with their command instead of outliving the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from pacore_agents.swe.images import commit_repo, copy_repo
from pacore_agents.swe.sandbox import BaseSandbox, CommandResult, SandboxError

MAX_OUTPUT_CHARS = 4_000_000
KEPT_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "VIRTUAL_ENV",
                  "PYENV_ROOT", "PYENV_VERSION")
KEPT_PREFIXES = ("LC_",)
# Runs the command, then kills everything it left behind. As a child subreaper it inherits every orphan of
# the command, so a process that left the command's session (setsid) is still found among its children.
SUPERVISOR = r"""
import ctypes, os, signal, subprocess, sys, time
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except (AttributeError, OSError):
    pass  # not Linux: the process group is still killed
def children():
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:
                found.append(int(entry))
    return found
def end_all(*_):
    for _ in range(200):
        pids = children()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.01)
signal.signal(signal.SIGTERM, lambda *_: (end_all(), os._exit(143)))
code = subprocess.call(sys.argv[1:])
end_all()
sys.exit(code)
"""


class UnsafeRuntimeWarning(UserWarning):
    """The local runtime runs model commands on the host, without isolation."""


class LocalSandbox(BaseSandbox):
    def __init__(self, row: dict):
        warnings.warn(
            "runtime 'local' runs model commands directly on this host (no isolation, network on): "
            "use it only for trusted development; use the docker runtime otherwise",
            UnsafeRuntimeWarning,
            stacklevel=3,
        )
        self.instance_id = row["instance_id"]
        self._tmp = tempfile.mkdtemp(prefix=f"pacore-local-{self.instance_id[:40].replace('/', '_')}-")
        self._closed = False
        self.workdir = os.path.join(self._tmp, "repo")
        self.scratch = os.path.join(self._tmp, "scratch")
        os.mkdir(self.scratch)
        try:
            self.base_commit = self._materialise(row, Path(self.workdir))
        except BaseException:
            self.close()
            raise

    def _materialise(self, row: dict, target: Path) -> str:
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
        for args in (["clone", "-q", "--shared", str(source), str(target)],
                     ["-C", str(target), "checkout", "-q", row["base_commit"]]):
            done = subprocess.run(["git", *args], capture_output=True, text=True)
            if done.returncode != 0:
                raise SandboxError(f"git {args[0]} failed for {self.instance_id}: {done.stderr.strip()}")
        return row["base_commit"]

    def environment(self) -> dict[str, str]:
        """What a command sees: the allow-listed variables of this process, temporary files in the sandbox."""
        kept = {key: value for key, value in os.environ.items()
                if key in KEPT_VARIABLES or key.startswith(KEPT_PREFIXES)}
        return {"PATH": os.defpath, **kept, "TMPDIR": self.scratch, "PYTHONDONTWRITEBYTECODE": "1"}

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -c` in the copy, stdout and stderr merged; everything it started is killed when it ends."""
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")
        with tempfile.TemporaryFile() as sink:
            process = subprocess.Popen(
                [sys.executable, "-c", SUPERVISOR, "bash", "-c", command], cwd=self.workdir, stdout=sink,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=self.environment(),
            )
            timed_out = False
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(process)
            sink.seek(0)
            data = sink.read(MAX_OUTPUT_CHARS)
        exit_code = 124 if timed_out else process.returncode
        return CommandResult(exit_code=exit_code, output=data.decode("utf-8", errors="replace"), timed_out=timed_out)

    def read_file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_file(self, path: str, content: str | bytes) -> None:
        Path(path).write_bytes(content.encode() if isinstance(content, str) else content)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shutil.rmtree(self._tmp, ignore_errors=True)


def _stop(process: subprocess.Popen) -> None:
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
