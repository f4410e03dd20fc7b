"""Fixtures of the SWE agent's tests: SWE-ReX servers of their own, each at an address of its own."""

from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from waits import wait_until

from pacore_agents.swe.rex_images import REX_SERVE, TOKEN_FILE_VARIABLE

TEST_LABEL = "pacore.test"


@dataclass
class RexServer:
    """A SWE-ReX server in a capped host-network container, on a loopback port of its own."""

    url: str
    container: Any


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str, token: str) -> bool:
    from pacore_agents.swe.rex_http import RexConnection, tcp_connector
    from pacore_agents.swe.sandbox import SandboxError

    connection = RexConnection(tcp_connector(url), token, where=url)
    try:
        connection.call("is_alive", None, timeout=2)
        return True
    except SandboxError:
        return False
    finally:
        connection.close()


@pytest.fixture
def rex_servers(client, tmp_path):
    """Factory: ``rex_servers(image, n)`` starts ``n`` servers from ``image`` (SWE-ReX's server inside: images
    pacore builds), each in a host-network container capped as a sandbox is (2 GiB, 256 processes, one CPU) and
    listening on its own loopback port, the token in a file mounted read-only; ``.token_file`` names that file.
    Every container it started is removed afterwards, whatever the test did to it."""
    token_file = tmp_path / "rex-token"
    token_file.write_text(secrets.token_urlsafe(24))
    started: list[Any] = []

    def start(image: str, count: int) -> list[RexServer]:
        servers = []
        for _ in range(count):
            port = free_port()
            container = client.containers.run(
                image,
                [REX_SERVE, "--host", "127.0.0.1", "--port", str(port)],
                detach=True,
                name=f"pacore-test-rex-{os.getpid()}-{port}",
                labels={TEST_LABEL: str(os.getpid())},
                network_mode="host",
                mem_limit="2g",
                memswap_limit="2g",
                pids_limit=256,
                nano_cpus=10**9,
                environment={TOKEN_FILE_VARIABLE: "/run/rex-token"},
                volumes={str(token_file): {"bind": "/run/rex-token", "mode": "ro"}},
            )
            started.append(container)
            servers.append(RexServer(f"http://127.0.0.1:{port}", container))
        token = token_file.read_text()
        for server in servers:
            wait_until(lambda s=server: answers(s.url, token), 60, what=f"SWE-ReX's server at {server.url}")
        return servers

    start.token_file = token_file  # type: ignore[attr-defined]
    yield start
    for container in started:
        try:
            container.remove(force=True)
        except Exception:  # already gone
            pass


def hosts_file(path: Path, hosts: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"hosts": hosts}))
    return path
