"""UNSAFE: episodes as plain subprocesses in a temporary copy of the repository, for trusted development.

Model commands run on this host with your user's rights and network; only use it with models and
tasks you trust. It exists because Docker is not always at hand while developing an agent. The copy
comes from a local task's folder, or for SWE-bench rows from a clone found under
``$PACORE_SWE_REPOS`` (``owner__name`` folders), checked out at the base commit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

from pacore_agents.swe.images import commit_repo, copy_repo
from pacore_agents.swe.sandbox import BaseSandbox, CommandResult, SandboxError

MAX_OUTPUT_CHARS = 4_000_000


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
        self._tmp = tempfile.mkdtemp(prefix=f"pacore-local-{self.instance_id[:40]}-")
        self._closed = False
        self.workdir = os.path.join(self._tmp, "repo")
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

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -lc` in the copy, stdout and stderr merged; the whole process group is killed on timeout."""
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")
        with tempfile.TemporaryFile() as sink:
            process = subprocess.Popen(
                ["bash", "-lc", command], cwd=self.workdir, stdout=sink, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
            timed_out = False
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(process)
            sink.seek(0)
            data = sink.read(MAX_OUTPUT_CHARS)
        exit_code = 124 if timed_out else process.returncode
        return CommandResult(exit_code=exit_code, output=data.decode("utf-8", errors="replace"), timed_out=timed_out)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shutil.rmtree(self._tmp, ignore_errors=True)


def _kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return
            time.sleep(0.05)
    process.wait()
