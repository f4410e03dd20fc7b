"""Which process owns a sandbox container, and whether that owner is certainly gone.

Every sandbox container is labelled with the process that opened it: its PID, that process's start
time (so a reused PID is not mistaken for it), and the PID namespace it lives in (boot id plus the
namespace's inode: a PID means nothing outside it). A run killed with SIGKILL leaves its containers
behind; :func:`sweep_orphans` removes those, and only those, whose owner is certainly dead: same
namespace as ours, and no process with that PID and start time. Containers of other machines, other
containers or other live runs sharing the daemon are never touched.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient  # docker-py ships no types: Any to the checker

SANDBOX_LABEL = "pacore.sandbox"
PID_LABEL = "pacore.pid"
START_LABEL = "pacore.pid_start"
NAMESPACE_LABEL = "pacore.pid_namespace"
HOST_LABEL = "pacore.host"  # for people reading `docker ps`; the namespace label decides


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (None: no such process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the name before ")" may hold spaces


def pid_namespace() -> str | None:
    """This process's PID namespace on this boot, or None where the system does not say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def owner_labels() -> dict[str, str]:
    labels = {SANDBOX_LABEL: "episode", PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()}
    start, namespace = process_start(os.getpid()), pid_namespace()
    if start and namespace:
        labels |= {START_LABEL: start, NAMESPACE_LABEL: namespace}
    return labels


def owner_is_dead(labels: dict[str, str]) -> bool:
    """True only when the labelled owner certainly no longer runs (unknown or elsewhere: False)."""
    pid, start, namespace = labels.get(PID_LABEL, ""), labels.get(START_LABEL), labels.get(NAMESPACE_LABEL)
    here = pid_namespace()
    if not (pid.isdigit() and start and namespace and here) or namespace != here:
        return False
    return process_start(int(pid)) != start


def sweep_orphans(client: DockerClient | None = None, *, log: Callable[[str], None] = print) -> int:
    """Remove the sandbox containers whose owner is certainly dead; say and return how many."""
    if client is None:
        from pacore_agents.swe.images import docker_client

        client = docker_client()
    removed = 0
    for container in client.containers.list(all=True, filters={"label": SANDBOX_LABEL}):
        if not owner_is_dead(container.labels or {}):
            continue
        try:
            container.remove(force=True, v=True)
            removed += 1
        except Exception as exc:  # another sweep removed it first, or the daemon refused: say so, go on
            log(f"could not remove orphaned sandbox {container.name}: {exc}")
    if removed:
        log(f"removed {removed} sandbox container(s) left by a killed run")
    return removed
