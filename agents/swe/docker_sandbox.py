"""Episodes in Docker: one fresh container per episode, no network, bounded memory, processes and CPU.

No model command ever runs on the host. The container is removed when the sandbox closes, which the
context manager guarantees on errors and KeyboardInterrupt too; an interpreter exit removes any that a
caller forgot to close. ``DOCKER_HOST`` selects a remote daemon, exactly as for the docker CLI.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import posixpath
import re
import tarfile
import threading
import time
import uuid
import weakref

from pacore_agents.swe.images import (
    CONTAINER_WORKDIR,
    ImageBuildError,
    docker_client,
    ensure_task_image,
    image_exists,
)
from pacore_agents.swe.sandbox import BaseSandbox, CommandResult, SandboxError

log = logging.getLogger(__name__)

SANDBOX_LABEL = "pacore.sandbox"
PID_LABEL = "pacore.pid"  # which process opened it, so concurrent runs can tell theirs apart
MAX_OUTPUT_BYTES = 4_000_000  # kept as head + tail; the agent cuts further for the model
KILL_GRACE_S = 5
# SWE-bench images keep their Python in a conda env that only interactive shells activate.
ENV_PRELUDE = (
    "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate; "
    "conda activate testbed >/dev/null 2>&1; fi"
)
_OPEN: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()


def missing_image_message(row: dict) -> str:
    image, instance_id = row.get("image"), row.get("instance_id")
    host = os.environ.get("DOCKER_HOST", "the local Docker daemon")
    return (
        f"Docker image {image!r} for {instance_id} is not on {host}. SWE-bench rows name swebench's "
        f"prebuilt images: on a Docker host with internet run `docker pull {image}` (or "
        "`swebench images build ...`), or point DOCKER_HOST at a daemon that has it. "
        "Local tasks (--dataset local) build their images automatically."
    )


class DockerSandbox(BaseSandbox):
    def __init__(self, row: dict, *, memory: str = "2g", pids: int = 256, cpus: float = 1.0, client=None):
        self.instance_id = row["instance_id"]
        self.image = row["image"]
        self.base_commit = row["base_commit"]
        self.workdir = row.get("workdir") or CONTAINER_WORKDIR
        self._container = None
        self._closed = False
        try:
            self._client = client or docker_client()
            self._ensure_image(row)
        except ImageBuildError as exc:
            raise SandboxError(str(exc)) from exc
        name = f"pacore-sbx-{re.sub(r'[^a-zA-Z0-9_.-]', '-', self.instance_id)}-{uuid.uuid4().hex[:8]}"
        self._container = self._client.containers.create(
            self.image,
            command=["tail", "-f", "/dev/null"],
            name=name,
            labels={SANDBOX_LABEL: "episode", "pacore.instance_id": self.instance_id, PID_LABEL: str(os.getpid())},
            network_mode="none",
            mem_limit=memory,
            memswap_limit=memory,
            pids_limit=pids,
            nano_cpus=int(cpus * 1e9),
            security_opt=["no-new-privileges"],
            working_dir=self.workdir,
            detach=True,
        )
        _OPEN.add(self)
        try:
            self._container.start()
        except BaseException:
            self.close()
            raise

    @property
    def container_id(self) -> str | None:
        return self._container.id if self._container is not None else None

    def _ensure_image(self, row: dict) -> None:
        if image_exists(self._client, self.image) and not row.get("pacore_task_dir"):
            return
        if row.get("pacore_task_dir"):
            ensure_task_image(row, self._client, log=log.info)
            return
        raise SandboxError(missing_image_message(row))

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -lc` in the repository, stdout and stderr merged; killed after ``timeout`` seconds."""
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")
        script = f"{ENV_PRELUDE}\n{command}"
        argv = ["timeout", "-k", str(KILL_GRACE_S), f"{max(timeout, 1):g}", "bash", "-lc", script]
        api = self._client.api
        exec_id = api.exec_create(self._container.id, argv, stdout=True, stderr=True, workdir=self.workdir)["Id"]
        collected = _BoundedOutput(MAX_OUTPUT_BYTES)
        started = time.monotonic()

        def pump() -> None:
            for chunk in api.exec_start(exec_id, stream=True):
                collected.add(chunk)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        reader.join(timeout + KILL_GRACE_S + 30)  # `timeout` inside ends it; this covers detached children
        if reader.is_alive():
            return CommandResult(exit_code=124, output=collected.text(), timed_out=True)
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = -1 if exit_code is None else int(exit_code)
        elapsed = time.monotonic() - started
        timed_out = exit_code in (124, 137) and elapsed >= timeout - 0.5
        return CommandResult(exit_code=exit_code, output=collected.text(), timed_out=timed_out)

    def write_file(self, path: str, content: str) -> None:
        """Put a file into the container byte for byte (evaluation uses it for the patch and script)."""
        data = content.encode()
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(posixpath.basename(path))
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
        if not self._container.put_archive(posixpath.dirname(path) or "/", buffer.getvalue()):
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
            self._container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # never mask the episode's own error, but say what is left behind
            log.warning("could not remove sandbox container %s: %s", self._container.name, exc)


class _BoundedOutput:
    """Keeps the first and last ``limit / 2`` bytes of a stream, so a flood cannot exhaust memory."""

    def __init__(self, limit: int):
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
        middle = f"\n[... {self.dropped} bytes cut ...]\n".encode() if self.dropped else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")


def leftover_sandboxes(client=None, *, this_process: bool = True) -> list:
    """Sandbox containers that still exist (any state): this process's, or every pacore run's."""
    client = client or docker_client()
    labels = [SANDBOX_LABEL] + ([f"{PID_LABEL}={os.getpid()}"] if this_process else [])
    return client.containers.list(all=True, filters={"label": labels})


@atexit.register
def _close_forgotten() -> None:
    for sandbox in list(_OPEN):
        sandbox.close()
