"""SWE-ReX servers on this machine, each at an address of its own: for trying ``--runtime swerex`` on one machine,
for ``pacore swe bench-hosts`` and for the tests.

Each server runs in a host-network container made from an image pacore built (SWE-ReX's server inside), capped
as a sandbox is (2 GiB of memory and swap, 256 processes, one CPU), with Docker's init as PID 1, listening on a
loopback port of its own,
its token in a file mounted read-only (docs/swe-sandboxes.md, "Standing up a host in one command"). Every
container started is removed on exit, whatever happened to it meanwhile.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pacore_agents.swe.rex_http import RexConnection, tcp_connector
from pacore_agents.swe.rex_images import REX_SERVE, TOKEN_FILE_VARIABLE
from pacore_agents.swe.sandbox import SandboxError

LABEL = "pacore.rex_server"  # the pid of the process that started the server
START_TIMEOUT_S = 60.0


@dataclass
class LocalServer:
    """One server: its URL (``http://127.0.0.1:PORT``) and its container."""

    url: str
    container: Any


class LocalServers:
    """Starts SWE-ReX servers in capped host-network containers; ``token_file`` holds their token (made here)."""

    def __init__(self, client: Any, folder: Path, *, labels: dict[str, str] | None = None):
        self.client = client
        self.token_file = folder / "rex-token"
        self.token_file.write_text(secrets.token_urlsafe(24))
        self.token_file.chmod(0o600)
        self.labels = {LABEL: str(os.getpid()), **(labels or {})}
        self.containers: list[Any] = []

    def __enter__(self) -> LocalServers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def start(self, image: str, count: int) -> list[LocalServer]:
        """``count`` servers from ``image``, each answering before this returns."""
        servers = []
        for _ in range(count):
            port = free_port()
            container = self.client.containers.run(
                image,
                [REX_SERVE, "--host", "127.0.0.1", "--port", str(port)],
                detach=True,
                init=True,  # reaps what a killed command supervisor leaves (the server reaps only its own children)
                name=f"pacore-rex-{os.getpid()}-{port}",
                labels=self.labels,
                network_mode="host",
                mem_limit="2g",
                memswap_limit="2g",
                pids_limit=256,
                nano_cpus=10**9,
                environment={TOKEN_FILE_VARIABLE: "/run/rex-token"},
                volumes={str(self.token_file): {"bind": "/run/rex-token", "mode": "ro"}},
            )
            self.containers.append(container)
            servers.append(LocalServer(f"http://127.0.0.1:{port}", container))
        for server in servers:
            self.wait(server.url)
        return servers

    def answers(self, url: str) -> bool:
        """Whether the server at ``url`` answers a health check with this token."""
        probe = RexConnection(tcp_connector(url), self.token_file.read_text(), where=url)
        try:
            probe.call("is_alive", None, timeout=2)
            return True
        except SandboxError:
            return False
        finally:
            probe.close()

    def wait(self, url: str, timeout: float = START_TIMEOUT_S) -> None:
        """Until the server at ``url`` answers (it starts in its container); a ``SandboxError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not self.answers(url):
            if time.monotonic() > deadline:
                raise SandboxError(f"SWE-ReX's server at {url} did not answer within {timeout:g} s")
            time.sleep(0.1)

    def remove(self) -> None:
        for container in self.containers:
            try:
                container.remove(force=True)
            except Exception:  # already gone  # noqa: BLE001
                pass
        self.containers = []


def free_port() -> int:
    """A loopback port free now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
