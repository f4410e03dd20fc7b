"""Episodes in Docker: one fresh container per episode, no network, bounded memory, processes, CPU and disk.

No model command ever runs on the host. The container's first process is Docker's init, which reaps
orphans. When a command ends (or is stopped), every process it left running is ended too, by a
fork-free shell loop in a separate ``docker exec`` (Docker attaches an exec's first process even to a
container at its process cap); should that fail, the container is restarted, which ends every process and
keeps every file. So the next command, and the diff, always start in a container with nothing else
running: detached processes cannot starve them.

The disk cap is a real quota where the daemon has one (``--storage-opt size``: overlay2 on xfs with
``pquota``, btrfs, zfs, devicemapper): a write past it fails, whatever its speed. Elsewhere every file is
capped (``ulimit -f``) and the container's writable layer is measured every ``DISK_POLL_S`` seconds while a
command runs, and after every command (so before the next one and before the diff). Either way, a
command that reaches the cap is stopped, and the files it wrote are removed, largest first, until the
layer is back under the cap; the command's output says what was removed (see docs/swe-sandboxes.md for
the bound on the host's disk that holds without a quota).

pacore's own commands (the diff) run after all that, outside the watcher, writing only to a small tmpfs
of the container (``/run/pacore``). Its log is capped (json-file, 1 MB). The container is removed when
the sandbox closes, which the context manager guarantees on errors and KeyboardInterrupt too; an
interpreter exit removes any that a caller forgot to close; a run killed outright leaves containers that
the next run's orphan sweep removes (``owners.py``). ``DOCKER_HOST`` selects a remote daemon, exactly as
for the docker CLI.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import logging
import os
import re
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pacore_agents.swe.docker_files import put_file, read_file
from pacore_agents.swe.exec_stream import STDOUT, exec_socket, read_frame
from pacore_agents.swe.images import CONTAINER_WORKDIR, ImageBuildError, docker_client, ensure_task_image
from pacore_agents.swe.owners import NAMESPACE_LABEL, PID_LABEL, SANDBOX_LABEL, owner_labels, pid_namespace
from pacore_agents.swe.sandbox import BaseSandbox, BoundedOutput, CommandResult, SandboxError, SystemResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from docker import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)

MAX_LOG_BYTES = 1_000_000_000  # a command streamed to a file (evaluation logs) is kept whole up to this
CONTAINER_LOG = {"max-size": "1m", "max-file": "1"}
DISK_POLL_S = 0.5
KILL_GRACE_S = 5
END_ATTEMPTS = 40  # rounds of ending processes (0.1 s apart) before the container is restarted instead
PIDS_HEADROOM = 16  # process slots added for a moment when the cap leaves none to end processes with
QUOTA_MARGIN = 16 * 2**20  # with a quota, a layer this close to the cap counts as full
SCRATCH = "/run/pacore"  # a tmpfs: pacore's own files (the diff's index) never touch the container's disk
SCRATCH_MOUNT = "size=64m,mode=700"
# SWE-bench images keep their Python in a conda env that only interactive shells activate (images built
# here put a stand-in at the same path).
ENV_PRELUDE = (
    "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate; "
    "conda activate testbed >/dev/null 2>&1; fi"
)
# Ends every process but the init (PID 1), the keeper ($1) and itself, with shell built-ins only (it forks
# nothing, so it works in a container at its process cap): stop them all, then kill them all, a few times.
# Prints how many it found at first, and how many were still there at the end (killed ones still exiting
# count: the caller asks again a moment later).
_END_ALL = r"""
keep=" 1 $1 $$ "; first=-1; found=0
for pass in 1 2 3 4 5; do
    found=0
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        case "$keep" in *" $p "*) continue;; esac
        read -r stat 2>/dev/null < "$d/stat" || continue
        case "${stat##*) }" in Z*) continue;; esac
        kill -STOP "$p" 2>/dev/null && found=$((found + 1))
    done
    [ "$first" -lt 0 ] && first=$found
    [ "$found" -eq 0 ] && break
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        case "$keep" in *" $p "*) continue;; esac
        kill -KILL "$p" 2>/dev/null
    done
done
echo "$first $found"
"""
# The process keeping the container alive (the init's first child), and the container's clock.
_KEEPER = "cat /proc/1/task/1/children 2>/dev/null || awk '$4 == 1 {print $1}' /proc/[0-9]*/stat | sort -n; date +%s.%N"
# Files that the command wrote (changed since its stamp, or else since its start by the container's clock),
# with their sizes, NUL-separated.
STAMP = f"{SCRATCH}/command-started"
_WRITTEN_SINCE = (
    f"if [ -f {STAMP} ]; then since='-cnewer {STAMP}'; else since='-newerct @{{since}}'; fi; "
    "find / -xdev -type f $since -printf '%s %p\\0' 2>/dev/null; true"
)
# Removes the files named on stdin; a file the repository tracks is restored from HEAD instead.
_REMOVE = r"""
while IFS= read -r -d '' f; do
    rel=${f#"$PWD"/}
    rm -f -- "$f"
    if [ "$rel" != "$f" ] && git ls-files --error-unmatch -- "$rel" >/dev/null 2>&1; then
        git checkout -q HEAD -- "$rel" 2>/dev/null || true
    fi
done
"""
_OPEN: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()
_NO_QUOTA: set[str] = set()  # daemons (by API address) that refused --storage-opt size


def parse_size(size: str) -> int:
    """Bytes of a Docker-style size: ``512m``, ``4g``, ``1000000``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", size.lower())
    if not match:
        raise SandboxError(f"size {size!r}: give a number with an optional k/m/g/t suffix, e.g. 4g")
    return int(float(match.group(1)) * 1024 ** " kmgt".index(match.group(2) or " "))


def missing_image_message(row: dict[str, Any]) -> str:
    image, instance_id = row.get("image"), row.get("instance_id")
    host = os.environ.get("DOCKER_HOST", "the local Docker daemon")
    return (
        f"Docker image {image!r} for {instance_id} is not on {host}. Build it offline from a snapshot of the "
        f"repository: `pacore swe images build --dataset DATASET --instances {instance_id} --repos DIR` (covered "
        f"repositories: see the README), or on a Docker host with internet run `docker pull {image}`, or point "
        "DOCKER_HOST at a daemon that has it. Local tasks (--dataset local) build their images automatically."
    )


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


class DockerSandbox(BaseSandbox):
    scratch = SCRATCH
    host = "local"  # the daemon, as an episode's record names it (a --hosts entry's name for swerex)

    def __init__(
        self,
        row: dict[str, Any],
        *,
        memory: str = "2g",
        pids: int = 256,
        cpus: float = 1.0,
        disk: str = "4g",
        client: DockerClient | None = None,
    ):
        super().__init__()
        self.instance_id = row["instance_id"]
        self.base_commit = row["base_commit"]
        self.workdir = row.get("workdir") or CONTAINER_WORKDIR
        self.disk_cap = parse_size(disk)
        self._pids_limit = pids
        self.quota = False  # whether the daemon enforces the disk cap itself
        self._container: Container = None  # None until created (docker-py ships no types: Any to the checker)
        self._closed = False
        self._keeper = ""
        self._clock_offset = 0.0  # the container's clock minus this host's
        self._restarts: list[str] = []  # restarts since the last command's notes were made
        if client is None and os.environ.get("DOCKER_HOST"):
            self.host = os.environ["DOCKER_HOST"]
        try:
            self._client = client or docker_client()
            self.image = self._ensure_image(row)
        except ImageBuildError as exc:
            raise SandboxError(str(exc)) from exc
        import docker

        name = f"pacore-sbx-{re.sub(r'[^a-zA-Z0-9_.-]', '-', self.instance_id)[:80]}-{uuid.uuid4().hex[:8]}"
        self._container = self._create(
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
            tmpfs={SCRATCH: SCRATCH_MOUNT},
            working_dir=self.workdir,
            detach=True,
        )
        _OPEN.add(self)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _create(self, image: str, **options: Any) -> Container:
        """Create the container with a real disk quota where the daemon has one, else without."""
        import docker

        daemon = self._client.api.base_url
        if daemon not in _NO_QUOTA:
            try:
                container = self._client.containers.create(image, storage_opt={"size": str(self.disk_cap)}, **options)
                self.quota = True
                return container
            except docker.errors.APIError as exc:
                if "storage" not in str(exc).lower() and "quota" not in str(exc).lower():
                    raise
                _NO_QUOTA.add(daemon)
                log.info("Docker at %s has no disk quota (%s): the disk cap is enforced by checks", daemon, exc)
        return self._client.containers.create(image, **options)

    def _start(self) -> None:
        """Start the container (again, after a restart) and learn its keeper process and its clock."""
        self._container.start()
        asked = time.time()
        words = self._container.exec_run(["sh", "-c", _KEEPER]).output.decode().split()
        self._keeper = words[0] if len(words) > 1 else ""
        try:
            self._clock_offset = float(words[-1]) - asked
        except (IndexError, ValueError):
            self._clock_offset = 0.0

    @property
    def container_id(self) -> str | None:
        return self._container.id if self._container is not None else None

    def _ensure_image(self, row: dict[str, Any]) -> str:
        if row.get("pacore_task_dir"):
            return ensure_task_image(row, self._client, log=log.info)
        from pacore_agents.swe.offline_images import image_for

        image = image_for(self._client, row)
        if image is None:
            raise SandboxError(missing_image_message(row))
        return image

    # ---------------------------------------------------------------------------------- the model's commands

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -lc` in the repository, stdout and stderr merged, output capped (head and tail kept);
        killed after ``timeout`` seconds; what it left running is ended, and the disk cap enforced."""
        collected = BoundedOutput()
        exit_code, timed_out, notes = self._exec(command, timeout, collected.add)
        return collected.result(exit_code, timed_out, notes)

    def run_to_file(self, command: str, path: Path, timeout: float, limit: int = MAX_LOG_BYTES) -> CommandResult:
        """Like :meth:`run`, but the whole output goes to ``path`` (up to ``limit`` bytes, then a note);
        the result's output is empty."""
        with path.open("wb") as sink:
            writer = _FileSink(sink, limit)
            exit_code, timed_out, notes = self._exec(command, timeout, writer.add)
            sink.write(writer.note().encode() + "".join(f"\n[pacore: {note}]\n" for note in notes).encode())
        return CommandResult(exit_code=exit_code, output="", timed_out=timed_out, notes=notes)

    def _exec(self, command: str, timeout: float, sink: Callable[[bytes], None]) -> tuple[int, bool, list[str]]:
        self._check_open()
        # one pipe: output in the order it was written; the stamp dates what the command writes
        script = f"exec 2>&1\n: 2>/dev/null > {STAMP}\n{ENV_PRELUDE}\n{command}"
        argv = ["timeout", "-k", str(KILL_GRACE_S), f"{max(timeout, 1):g}", "bash", "-lc", script]
        api = self._client.api
        since = time.time() + self._clock_offset - 0.2  # the container's clock, when the stamp is gone
        exec_id = api.exec_create(self._container.id, argv, stdout=True, stderr=True, workdir=self.workdir)["Id"]
        started = time.monotonic()

        def pump() -> None:
            for chunk in api.exec_start(exec_id, stream=True):
                sink(chunk)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = started + timeout + KILL_GRACE_S + 30  # `timeout` inside ends it; this covers detached children
        over_cap = False
        while reader.is_alive() and time.monotonic() < deadline:
            reader.join(DISK_POLL_S)
            if reader.is_alive() and not over_cap and self._disk_full(self.disk_used()):
                over_cap = True
                self._end_processes()  # the command and all it started: its stream ends
        hung = reader.is_alive()
        notes = self._settle(since, stopped_at_cap=over_cap)
        reader.join(KILL_GRACE_S)
        if hung:
            return 124, True, notes
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = -1 if exit_code is None else int(exit_code)
        timed_out = exit_code in (124, 137) and time.monotonic() - started >= timeout - 0.5 and not over_cap
        return exit_code, timed_out, notes

    def _settle(self, since: float, *, stopped_at_cap: bool = False) -> list[str]:
        """After a command: end what it left running, then bring the disk back under the cap if it went over."""
        stopped = self._end_processes()
        notes, self._restarts = self._restarts, []
        if stopped:
            notes.append(
                f"{stopped} process(es) the command left running were stopped: nothing a command starts "
                "outlives it (run servers and background jobs inside the command that uses them)"
            )
        used = self.disk_used()
        if stopped_at_cap or self._disk_full(used):
            notes.append(self._remove_written_since(since, used, stopped=stopped_at_cap))
        self.notes += notes
        return notes

    # ---------------------------------------------------------------------------------- processes

    def _end_processes(self) -> int:
        """End every process but the container's own; returns how many there were.

        An exec may fail to start in a container at its process cap (runc's own helper cannot fork there):
        then the cap is raised for the moment it takes. When processes still cannot be ended, or the command
        ended the container's keeper, the container is restarted (files kept)."""
        import docker

        found, failure = self._end_from_inside()
        if failure is not None and self._pids_limit > 0:
            try:
                self._set_pids_limit(self._pids_limit + PIDS_HEADROOM)
            except docker.errors.APIError:
                pass  # a stopped container (the command ended its keeper) takes no update: it is restarted below
            else:
                try:
                    found, failure = self._end_from_inside()
                finally:
                    with contextlib.suppress(docker.errors.APIError):  # stopped meanwhile: set again on restart
                        self._set_pids_limit(self._pids_limit)
        if failure is None:
            return found
        self._container.reload()
        if self._container.status != "running":
            failure = "a command ended the container's main process"
        self._restart(failure)
        if self._pids_limit > 0:
            self._set_pids_limit(self._pids_limit)  # whatever the interrupted raise left
        return found

    def _end_from_inside(self) -> tuple[int, str | None]:
        """Run the fork-free loop until nothing is left: (processes found at first, None) or (…, why not)."""
        import docker

        first = None
        for _ in range(END_ATTEMPTS):
            try:
                done = self._container.exec_run(["sh", "-c", _END_ALL, "pacore-end", self._kept_pids()])
            except docker.errors.APIError as exc:
                return first or 0, f"processes could not be ended from inside ({exc.explanation or exc})"
            counts = done.output.decode(errors="replace").split()
            if done.exit_code != 0 or len(counts) != 2 or not all(c.isdigit() for c in counts):
                output = done.output[-300:].decode(errors="replace").strip()
                return first or 0, f"processes could not be ended from inside ({output})"
            first = int(counts[0]) if first is None else first
            if counts[1] == "0":
                return first, None
            time.sleep(0.1)  # killed processes still exiting (writing back their files)
        return first or 0, "processes were still running after being killed"

    def _kept_pids(self) -> str:
        """The container's own processes (beside the init), which ending every other one spares."""
        return self._keeper or "1"

    def _set_pids_limit(self, limit: int) -> None:
        """``docker update --pids-limit``: docker-py's update_container has no such argument, so the Engine API's
        own request, sent by its public parts (its client is a requests session; base URL and API version)."""
        import docker
        import requests

        api = self._client.api
        url = f"{api.base_url}/v{api.api_version}/containers/{self._container.id}/update"
        response = api.post(url, json={"PidsLimit": limit}, timeout=api.timeout)
        try:
            response.raise_for_status()
        except requests.HTTPError as exc:
            raise docker.errors.create_api_error_from_http_exception(exc) from exc

    def _restart(self, reason: str) -> None:
        log.info("restarting sandbox %s: %s", self._container.name, reason)
        self._container.restart(timeout=0)  # SIGKILL: every process ends; the writable layer stays
        self._start()
        self._restarts.append(f"the sandbox was restarted (files kept, every process ended): {reason}")

    # ---------------------------------------------------------------------------------- disk

    def disk_used(self) -> int:
        """Bytes written to the container's own layer (what the disk cap counts)."""
        found = self._client.api.containers(all=True, size=True, filters={"id": self._container.id})
        return int((found[0] if found else {}).get("SizeRw") or 0)

    def _disk_full(self, used: int) -> bool:
        """Over the cap; with a quota, at it (the daemon stops writes there, so the layer never goes over)."""
        return used > self.disk_cap or (self.quota and used >= self.disk_cap - QUOTA_MARGIN)

    def _remove_written_since(self, since: float, used: int, *, stopped: bool) -> str:
        """Remove what the command wrote, largest first, until the layer is back under the cap; say what."""
        listing = self.system(_WRITTEN_SINCE.format(since=f"{since:.3f}"), timeout=300).stdout
        written = []
        for entry in listing.split(b"\0"):
            digits, _, path = entry.partition(b" ")
            if digits.isdigit() and path:
                written.append((int(digits), path))
        written.sort(reverse=True)
        target = self.disk_cap - (QUOTA_MARGIN * 2 if self.quota else 0)  # with a quota: below where it trips
        chosen, freed = [], 0
        for size, path in written:
            if used - freed <= target:
                break
            chosen.append(path)
            freed += size
        if chosen:
            self.system(_REMOVE, stdin=b"\0".join(chosen) + b"\0", timeout=300)
        now = self.disk_used()
        names = ", ".join(p.decode(errors="replace") for p in chosen[:10]) + (" ..." if len(chosen) > 10 else "")
        removed = f"removed what it wrote, largest first: {names}" if chosen else "found nothing it wrote to remove"
        how = "was stopped at" if stopped else "went past"
        return (
            f"the command {how} this sandbox's disk cap ({_gib(used)} written, cap {_gib(self.disk_cap)}): "
            f"pacore {removed}; {_gib(now)} used now"
        )

    # ---------------------------------------------------------------------------------- pacore's own commands

    def system(self, script: str, *, stdin: bytes | None = None, timeout: float = 600) -> SystemResult:
        """``bash -c`` as root in the repository, after every process the model started has ended; whole
        stdout and stderr, ``stdin`` fed in. Writes only what the script writes (pacore's: the tmpfs)."""
        self._check_open()
        api = self._client.api
        argv = ["timeout", "-k", str(KILL_GRACE_S), f"{timeout:g}", "bash", "-c", script]
        if stdin is not None:  # the script reads exactly the bytes sent: no end of input is needed (TLS has none)
            argv[4:] = ["bash", "-c", 'head -c "$1" | bash -c "$2"', "pacore-stdin", str(len(stdin)), script]
        exec_id = api.exec_create(
            self._container.id,
            argv,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            workdir=self.workdir,
            environment={"PACORE_SCRATCH": SCRATCH},
        )["Id"]
        out, err = bytearray(), bytearray()
        connection = api.exec_start(exec_id, socket=True)
        sock = exec_socket(connection)
        try:
            if stdin is not None:
                sock.sendall(stdin)
            while (frame := read_frame(sock)) is not None:
                stream, data = frame
                (out if stream == STDOUT else err).extend(data)
        finally:
            connection.close()
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        return SystemResult(exit_code=-1 if exit_code is None else int(exit_code), stdout=bytes(out), stderr=bytes(err))

    def diff(self) -> str:
        """The patch (see :meth:`BaseSandbox.diff`), read once nothing the model started still runs."""
        self._check_open()
        self._end_processes()
        self.notes += self._restarts
        self._restarts = []
        return super().diff()

    # ---------------------------------------------------------------------------------- files and lifetime

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox for {self.instance_id} is closed")

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


def leftover_sandboxes(client: DockerClient | None = None, *, this_process: bool = True) -> list[Container]:
    """Sandbox containers that still exist (any state): this process's, or every pacore run's."""
    client = client or docker_client()
    labels = [SANDBOX_LABEL]
    if this_process:
        labels.append(f"{PID_LABEL}={os.getpid()}")
        if pid_namespace():
            labels.append(f"{NAMESPACE_LABEL}={pid_namespace()}")
    found: list[Container] = client.containers.list(all=True, filters={"label": labels})
    return found


@atexit.register
def _close_forgotten() -> None:
    for sandbox in list(_OPEN):
        sandbox.close()
