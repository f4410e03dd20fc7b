"""Episodes in Docker: one fresh container per episode, no network, bounded memory, processes, CPU and disk.

No model command ever runs on the host. The container's first process is Docker's init, which reaps
orphans: a command that leaves hundreds of exited background jobs cannot exhaust the process limit.
Its log is capped (json-file, 1 MB), every file is capped by the disk cap (``ulimit -f``), and the
writable layer is watched while a command runs: past the cap, every process but the container's own
is stopped and the command's output says so. The container is removed when the sandbox closes,
which the context manager guarantees on errors and KeyboardInterrupt too; an interpreter exit removes
any that a caller forgot to close; a run killed outright leaves containers that the next run's orphan
sweep removes (``owners.py``). ``DOCKER_HOST`` selects a remote daemon, exactly as for the docker CLI.
"""

from __future__ import annotations

import atexit
import codecs
import logging
import os
import re
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import IO

from pacore_agents.swe.docker_files import put_file, read_file
from pacore_agents.swe.images import CONTAINER_WORKDIR, ImageBuildError, docker_client, ensure_task_image
from pacore_agents.swe.owners import NAMESPACE_LABEL, PID_LABEL, SANDBOX_LABEL, owner_labels, pid_namespace
from pacore_agents.swe.sandbox import BaseSandbox, CommandResult, SandboxError

log = logging.getLogger(__name__)

MAX_OUTPUT_BYTES = 4_000_000  # kept as head + tail; the agent cuts further for the model
MAX_LOG_BYTES = 1_000_000_000  # a command streamed to a file (evaluation logs) is kept whole up to this
CONTAINER_LOG = {"max-size": "1m", "max-file": "1"}
DISK_POLL_S = 1.0
KILL_GRACE_S = 5
# SWE-bench images keep their Python in a conda env that only interactive shells activate (images built
# here put a stand-in at the same path).
ENV_PRELUDE = (
    "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate; "
    "conda activate testbed >/dev/null 2>&1; fi"
)
# Stops every process except the init (PID 1) and the process keeping the container alive.
_STOP_ALL = (
    'for d in /proc/[0-9]*; do p=${d#/proc/}; case "$p" in 1|"$0"|$$) ;; *) kill -9 "$p" 2>/dev/null;; esac; done'
)
# The process keeping the container alive: the init's first child (read right after the start).
_KEEPER = "cat /proc/1/task/1/children 2>/dev/null || awk '$4 == 1 {print $1}' /proc/[0-9]*/stat | sort -n"
_OPEN: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()


def parse_size(size: str) -> int:
    """Bytes of a Docker-style size: ``512m``, ``4g``, ``1000000``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", size.lower())
    if not match:
        raise SandboxError(f"size {size!r}: give a number with an optional k/m/g/t suffix, e.g. 4g")
    return int(float(match.group(1)) * 1024 ** " kmgt".index(match.group(2) or " "))


def missing_image_message(row: dict) -> str:
    image, instance_id = row.get("image"), row.get("instance_id")
    host = os.environ.get("DOCKER_HOST", "the local Docker daemon")
    return (
        f"Docker image {image!r} for {instance_id} is not on {host}. Build it offline from a snapshot of the "
        f"repository: `pacore swe images build --dataset DATASET --instances {instance_id} --repos DIR` (covered "
        f"repositories: see the README), or on a Docker host with internet run `docker pull {image}`, or point "
        "DOCKER_HOST at a daemon that has it. Local tasks (--dataset local) build their images automatically."
    )


class DockerSandbox(BaseSandbox):
    scratch = "/tmp"

    def __init__(
        self,
        row: dict,
        *,
        memory: str = "2g",
        pids: int = 256,
        cpus: float = 1.0,
        disk: str = "4g",
        client=None,
    ):
        self.instance_id = row["instance_id"]
        self.base_commit = row["base_commit"]
        self.workdir = row.get("workdir") or CONTAINER_WORKDIR
        self.disk_cap = parse_size(disk)
        self._container = None
        self._closed = False
        self._keeper = ""
        try:
            self._client = client or docker_client()
            self.image = self._ensure_image(row)
        except ImageBuildError as exc:
            raise SandboxError(str(exc)) from exc
        import docker

        name = f"pacore-sbx-{re.sub(r'[^a-zA-Z0-9_.-]', '-', self.instance_id)[:80]}-{uuid.uuid4().hex[:8]}"
        self._container = self._client.containers.create(
            self.image,
            command=["sleep", "infinity"],
            init=True,  # Docker's init as PID 1 reaps orphaned processes
            name=name,
            labels={**owner_labels(), "pacore.instance_id": self.instance_id[:1000]},
            network_mode="none",
            mem_limit=memory,
            memswap_limit=memory,
            pids_limit=pids,
            nano_cpus=int(cpus * 1e9),
            ulimits=[docker.types.Ulimit(name="fsize", soft=self.disk_cap, hard=self.disk_cap)],
            log_config=docker.types.LogConfig(type="json-file", config=CONTAINER_LOG),
            security_opt=["no-new-privileges"],
            working_dir=self.workdir,
            detach=True,
        )
        _OPEN.add(self)
        try:
            self._container.start()
            keeper = self._container.exec_run(["sh", "-c", _KEEPER]).output.decode().split()
            self._keeper = keeper[0] if keeper else ""
        except BaseException:
            self.close()
            raise

    @property
    def container_id(self) -> str | None:
        return self._container.id if self._container is not None else None

    def _ensure_image(self, row: dict) -> str:
        if row.get("pacore_task_dir"):
            return ensure_task_image(row, self._client, log=log.info)
        from pacore_agents.swe.offline_images import image_for

        image = image_for(self._client, row)
        if image is None:
            raise SandboxError(missing_image_message(row))
        return image

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -lc` in the repository, stdout and stderr merged, output capped (head and tail kept);
        killed after ``timeout`` seconds."""
        collected = _BoundedOutput(MAX_OUTPUT_BYTES)
        exit_code, timed_out, note = self._exec(command, timeout, collected.add)
        return CommandResult(exit_code=exit_code, output=collected.text() + note, timed_out=timed_out)

    def run_to_file(self, command: str, path: Path, timeout: float, limit: int = MAX_LOG_BYTES) -> CommandResult:
        """Like :meth:`run`, but the whole output goes to ``path`` (up to ``limit`` bytes, then a note);
        the result's output is empty."""
        with path.open("wb") as sink:
            writer = _FileSink(sink, limit)
            exit_code, timed_out, note = self._exec(command, timeout, writer.add)
            sink.write(writer.note().encode() + note.encode())
        return CommandResult(exit_code=exit_code, output="", timed_out=timed_out)

    def _exec(self, command: str, timeout: float, sink) -> tuple[int, bool, str]:
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")
        script = f"exec 2>&1\n{ENV_PRELUDE}\n{command}"  # one pipe: output in the order it was written
        argv = ["timeout", "-k", str(KILL_GRACE_S), f"{max(timeout, 1):g}", "bash", "-lc", script]
        api = self._client.api
        exec_id = api.exec_create(self._container.id, argv, stdout=True, stderr=True, workdir=self.workdir)["Id"]
        started = time.monotonic()

        def pump() -> None:
            for chunk in api.exec_start(exec_id, stream=True):
                sink(chunk)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = started + timeout + KILL_GRACE_S + 30  # `timeout` inside ends it; this covers detached children
        note = ""
        while reader.is_alive() and time.monotonic() < deadline:
            reader.join(DISK_POLL_S)
            if reader.is_alive() and not note:
                note = self._enforce_disk_cap()
        if reader.is_alive():
            return 124, True, note
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = -1 if exit_code is None else int(exit_code)
        timed_out = exit_code in (124, 137) and time.monotonic() - started >= timeout - 0.5 and not note
        return exit_code, timed_out, note

    def disk_used(self) -> int:
        """Bytes written to the container's own layer (what the disk cap counts)."""
        found = self._client.api.containers(all=True, size=True, filters={"id": self._container.id})
        return int((found[0] if found else {}).get("SizeRw") or 0)

    def _enforce_disk_cap(self) -> str:
        used = self.disk_used()
        if used <= self.disk_cap:
            return ""
        self._container.exec_run(["sh", "-c", _STOP_ALL, self._keeper or "1"])
        return (
            f"\n[pacore: this sandbox's disk cap was reached ({used / 2**30:.2f} GiB written, cap "
            f"{self.disk_cap / 2**30:.2f} GiB): the command and every process still running in the sandbox were "
            "stopped. Delete files you do not need before going on.]\n"
        )

    def read_file(self, path: str) -> bytes:
        try:
            return read_file(self._container, path)
        except Exception as exc:  # docker.errors.NotFound and friends
            raise SandboxError(f"could not read {path} from the sandbox of {self.instance_id}: {exc}") from exc

    def write_file(self, path: str, content: str | bytes) -> None:
        """Put a file into the container byte for byte (evaluation uses it for the patch and script)."""
        data = content.encode() if isinstance(content, str) else content
        if not put_file(self._container, path, data):
            raise SandboxError(f"could not write {path} into the sandbox of {self.instance_id}")

    def close(self) -> None:
        """Remove the container (idempotent; also after a failed start)."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        if self._container is None:
            return
        import docker

        try:
            self._container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # never mask the episode's own error, but say what is left behind
            log.warning("could not remove sandbox container %s: %s", self._container.name, exc)


class _BoundedOutput:
    """Keeps the first and last ``limit / 2`` bytes of a stream, so a flood cannot exhaust memory."""

    def __init__(self, limit: int):
        self.limit = limit
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
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

    def text(self) -> str:
        middle = (
            f"\n[... {self.dropped} bytes cut here: a command's output is capped at {self.limit} bytes, "
            "its first and last halves kept ...]\n".encode()
            if self.dropped
            else b""
        )
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")


class _FileSink:
    """Writes a stream to a file up to ``limit`` bytes and counts the rest. Bytes that are not UTF-8 become
    U+FFFD, as swebench decodes test output (its graders read the file as text)."""

    def __init__(self, handle: IO[bytes], limit: int):
        self.handle, self.limit, self.written, self.dropped = handle, limit, 0, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, chunk: bytes) -> None:
        room = max(self.limit - self.written, 0)
        self.handle.write(self.decoder.decode(chunk[:room]).encode())
        self.written += min(len(chunk), room)
        self.dropped += len(chunk) - min(len(chunk), room)

    def note(self) -> str:
        tail = self.decoder.decode(b"", final=True)
        if not self.dropped:
            return tail
        return f"{tail}\n[pacore: output cap of {self.limit} bytes reached; the last {self.dropped} bytes not kept]\n"


def leftover_sandboxes(client=None, *, this_process: bool = True) -> list:
    """Sandbox containers that still exist (any state): this process's, or every pacore run's."""
    client = client or docker_client()
    labels = [SANDBOX_LABEL]
    if this_process:
        labels.append(f"{PID_LABEL}={os.getpid()}")
        if pid_namespace():
            labels.append(f"{NAMESPACE_LABEL}={pid_namespace()}")
    return client.containers.list(all=True, filters={"label": labels})


@atexit.register
def _close_forgotten() -> None:
    for sandbox in list(_OPEN):
        sandbox.close()
