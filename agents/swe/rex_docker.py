"""An episode's container on a Docker daemon, its model commands served by SWE-ReX's server inside it.

The container is the Docker runtime's (:class:`DockerSandbox`: no network, memory, process, CPU and disk
caps, owner labels for the orphan sweep, restarted with its files when a command ends its keeper). pacore
starts SWE-ReX's server in it on the container's own loopback, with a token made for this container and
passed in the server's environment (never its command line), and reaches it through the Docker API
itself: one ``docker exec`` runs a small relay between its stdin/stdout and the server's port, and
pacore's keep-alive HTTP client talks through it. So the container keeps network "none", nothing listens
on the daemon's machine, and the traffic is as private as the connection to the daemon (its socket, SSH,
or TLS). The model's commands run under the supervisor of :mod:`supervisor`; pacore's own (the diff) and
the disk cap stay the Docker runtime's.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import threading
import time
from typing import IO, TYPE_CHECKING, Any, Literal

from pacore_agents.swe.docker_sandbox import DISK_POLL_S, SCRATCH, STAMP, DockerSandbox
from pacore_agents.swe.exec_stream import STDOUT, exec_socket, read_frame
from pacore_agents.swe.rex_http import HostUnreachable, RexConnection, TokenRefused
from pacore_agents.swe.rex_images import REX_PYTHON, REX_SERVE, TOKEN_VARIABLE
from pacore_agents.swe.rex_sandbox import MAX_LOG_BYTES, HostLost
from pacore_agents.swe.sandbox import MAX_OUTPUT_BYTES, CommandResult, SandboxError
from pacore_agents.swe.supervisor import command_result, ended_notes, read_report, supervised

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

REX_PORT = 8000  # on the container's own loopback: nothing outside the container reaches it
RUNNER_PID = f"{SCRATCH}/runner.pid"
SERVER_PID = f"{SCRATCH}/rex-server.pid"
# Joins the exec's stdin/stdout to the server's port; its first line is its process id.
RELAY = r"""
import os, select, socket, sys, time
os.write(1, b"%d\n" % os.getpid())
deadline = time.monotonic() + 60
while True:
    try:
        connection = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.05)
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    ready, _, _ = select.select([0, connection], [], [])
    if 0 in ready:
        data = os.read(0, 1 << 16)
        if not data:
            break
        connection.sendall(data)
    if connection in ready:
        data = connection.recv(1 << 16)
        if not data:
            break
        while data:
            data = data[os.write(1, data):]
"""


class ExecTunnel:
    """A socket-like stream to the server through one ``docker exec`` of the relay: what it sends goes to the
    relay's stdin; ``makefile("rb")`` reads the relay's stdout, demultiplexed from the exec's stream. As with
    a socket, closing it waits for the readers it handed out to be closed."""

    def __init__(self, api: Any, container_id: str):
        exec_id = api.exec_create(
            container_id, [REX_PYTHON, "-c", RELAY, str(REX_PORT)], stdin=True, stdout=True, stderr=True
        )["Id"]
        self._connection = api.exec_start(exec_id, socket=True)
        self._raw = exec_socket(self._connection)
        self._raw.settimeout(70)
        self._readers = 0
        self._closing = False
        head = b""
        while b"\n" not in head:
            frame = self._frame()
            if not frame:
                raise ConnectionError("the relay ended before it started")
            head += frame
        line, self._pending = head.split(b"\n", 1)
        self.pid = line.decode().strip()

    def _frame(self) -> bytes:
        """The next piece of the relay's stdout; empty at its end."""
        while (frame := read_frame(self._raw)) is not None:
            stream, data = frame
            if stream == STDOUT and data:
                return data
        return b""

    def readinto(self, buffer: Any) -> int:
        if not self._pending:
            self._pending = self._frame()
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def sendall(self, data: bytes) -> None:
        self._raw.sendall(data)

    def makefile(self, mode: Literal["rb"] = "rb") -> IO[bytes]:
        self._readers += 1
        return io.BufferedReader(_TunnelReader(self))

    def settimeout(self, timeout: float | None) -> None:
        self._raw.settimeout(timeout)

    def close(self) -> None:
        self._closing = True
        if self._readers == 0:
            with contextlib.suppress(OSError):
                self._connection.close()

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closing:
            self.close()


class _TunnelReader(io.RawIOBase):
    """The raw reader under ``ExecTunnel.makefile``'s buffer; closing it leaves the tunnel open."""

    def __init__(self, tunnel: ExecTunnel):
        self._tunnel = tunnel

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._tunnel.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._tunnel.reader_closed()
        super().close()


class RexDockerSandbox(DockerSandbox):
    """:class:`DockerSandbox` whose model commands travel to SWE-ReX's server in the container."""

    def __init__(
        self,
        row: dict[str, Any],
        *,
        host: str,
        client: Any,
        on_close: Callable[[RexDockerSandbox], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
        **caps: Any,
    ):
        self._token = secrets.token_urlsafe(32)  # this container's, and only pacore's
        self._rex: RexConnection | None = None
        self._tunnel: ExecTunnel | None = None
        self._server_pid = ""
        self._on_close = on_close
        self._on_lost = on_lost
        self.mark = secrets.token_hex(16)
        super().__init__(row, client=client, **caps)
        self.host = host

    # ------------------------------------------------------------------------------------------ the server

    def _start(self) -> None:
        """Start the container (again, after a restart), SWE-ReX's server in it, and the tunnel to it."""
        super()._start()
        api = self._client.api
        start = f'echo $$ > {SERVER_PID}; exec "$0" --host 127.0.0.1 --port {REX_PORT}'
        exec_id = api.exec_create(
            self._container.id, ["sh", "-c", start, REX_SERVE], environment={TOKEN_VARIABLE: self._token}
        )["Id"]
        api.exec_start(exec_id, detach=True)
        if self._rex is not None:
            self._rex.close()
        name = self._container.name
        self._rex = RexConnection(self._open_tunnel, self._token, where=f"SWE-ReX's server in {name} on {self.host}")
        try:
            self._rex.call("is_alive", None, timeout=70)
        except SandboxError as exc:
            raise SandboxError(
                f"SWE-ReX's server did not start in {name} ({exc}): the image {self.image} needs it at "
                f"{REX_SERVE} (images pacore builds have it: local tasks, `pacore swe images build`)"
            ) from None
        self._server_pid = self._container.exec_run(["cat", SERVER_PID]).output.decode().strip()

    def _open_tunnel(self) -> ExecTunnel:
        self._tunnel = ExecTunnel(self._client.api, self._container.id)
        return self._tunnel

    def _kept_pids(self) -> str:
        relay = self._tunnel.pid if self._tunnel is not None else ""
        return " ".join(pid for pid in (self._keeper or "1", self._server_pid, relay) if pid)

    # ------------------------------------------------------------------------------------------ commands

    def run(self, command: str, timeout: float = 120) -> CommandResult:
        """`bash -lc` in the repository under the supervisor, through the container's SWE-ReX server: output
        capped (head and tail kept), killed after ``timeout`` seconds, what it left running ended, and the
        disk cap enforced as by the Docker runtime."""
        return self._rex_exec(command, timeout)

    def run_to_file(self, command: str, path: Path, timeout: float, limit: int = MAX_LOG_BYTES) -> CommandResult:
        result = self._rex_exec(command, timeout, limit=limit, keep="head")
        path.write_text(result.output)
        return CommandResult(exit_code=result.exit_code, output="", timed_out=result.timed_out, notes=result.notes)

    def _rex_exec(self, command: str, timeout: float, *, limit: int | None = None, keep: str = "ends") -> CommandResult:
        self._check_open()
        since = time.time() + self._clock_offset - 0.2  # the container's clock, when the stamp is gone
        payload = supervised(
            REX_PYTHON,
            command,
            cwd=self.workdir,
            timeout=timeout,
            mark=self.mark,
            fsize=self.disk_cap,
            keep=keep,
            stamp=STAMP,
            pidfile=RUNNER_PID,
            limit=limit or MAX_OUTPUT_BYTES,
        )
        outcome: dict[str, Any] = {}

        def send() -> None:
            try:
                assert self._rex is not None
                outcome["answer"] = self._rex.call("execute", payload, timeout=payload["timeout"] + 10)
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        over_cap = False
        while sender.is_alive():
            sender.join(DISK_POLL_S)
            if sender.is_alive() and not over_cap and self._disk_full(self.disk_used()):
                over_cap = True
                self._stop_command()
        error = outcome.get("error")
        if isinstance(error, HostUnreachable | TokenRefused):
            report = self._recover(str(error))
        elif error is not None:
            raise error
        else:
            report = read_report(outcome["answer"])
            if report.get("lost"):  # the command killed its supervisor: end what it left, as the Docker runtime does
                report["ended"] = self._end_processes()
        notes = ended_notes(report) + self._restarts
        self._restarts = []
        used = self.disk_used()
        if over_cap or self._disk_full(used):
            notes.append(self._remove_written_since(since, used, stopped=over_cap))
        self.notes += notes
        if over_cap:
            report = {**report, "timed_out": False}
        if keep == "head" and report.get("dropped"):
            notes.append(f"output cap of {limit} bytes reached; the last {report['dropped']} bytes not kept")
        return command_result(report, notes)

    def _stop_command(self) -> None:
        """Stop the running command (the disk cap): its supervisor ends all it started and reports."""
        with contextlib.suppress(Exception):
            self._container.exec_run(["sh", "-c", f'kill -TERM "$(cat {RUNNER_PID})"'])

    def _recover(self, reason: str) -> dict[str, Any]:
        """The server stopped answering: the host is lost when its daemon does not answer either; else the
        command ended the server (or the container), which is restarted with its files, as a report."""
        try:
            self._client.ping()
            self._container.reload()
        except Exception:
            if self._on_lost is not None:
                self._on_lost(f"its Docker daemon stopped answering ({reason})")
            raise HostLost(self.host, reason) from None
        self._restart(f"a command ended the sandbox's SWE-ReX server ({reason})")
        empty = ""
        return {"exit": 137, "timed_out": False, "total": 0, "dropped": 0, "ended": 0, "head": empty, "tail": empty}

    def close(self) -> None:
        if self._rex is not None:
            self._rex.close()
        try:
            super().close()
        finally:
            if self._on_close is not None:
                callback, self._on_close = self._on_close, None
                callback(self)
