"""The orphan sweep removes only sandboxes whose recorded owner is certainly dead (real Docker containers)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from pacore_agents.swe.images import BASE_IMAGE, ensure_base_image
from pacore_agents.swe.owners import (
    NAMESPACE_LABEL,
    PID_LABEL,
    SANDBOX_LABEL,
    START_LABEL,
    owner_is_dead,
    owner_labels,
    pid_namespace,
    process_start,
    sweep_orphans,
)

pytestmark = pytest.mark.docker


def _dead_process_labels() -> dict[str, str]:
    """Owner labels of a process that ran in this namespace and has exited."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    labels = {**owner_labels(), PID_LABEL: str(child.pid), START_LABEL: process_start(child.pid)}
    child.wait()
    return labels


def test_owner_is_dead_only_when_certain():
    mine = owner_labels()
    assert not owner_is_dead(mine)
    dead = _dead_process_labels()
    assert owner_is_dead(dead)
    assert not owner_is_dead({**dead, NAMESPACE_LABEL: "another-boot/pid:[1]"})  # another machine or container
    assert not owner_is_dead({SANDBOX_LABEL: "episode", PID_LABEL: dead[PID_LABEL]})  # an old label: unsure
    reused = {**mine, START_LABEL: str(int(mine[START_LABEL]) - 1)}  # our PID, but another start time
    assert owner_is_dead(reused)
    assert pid_namespace() and mine[NAMESPACE_LABEL] == pid_namespace()


def test_sweep_removes_dead_owners_containers_and_nothing_else(client):
    ensure_base_image(client)
    run = uuid.uuid4().hex[:8]
    dead = _dead_process_labels()
    kinds = {
        "dead": dead,
        "live": owner_labels(),
        "foreign": {**dead, NAMESPACE_LABEL: "another-boot/pid:[4026531836]"},
        "legacy": {SANDBOX_LABEL: "episode", PID_LABEL: dead[PID_LABEL]},
    }
    containers = {
        kind: client.containers.create(
            BASE_IMAGE,
            ["true"],
            name=f"pacore-test-sweep-{kind}-{run}",
            labels={**labels, "pacore.test": run},
            network_mode="none",
        )
        for kind, labels in kinds.items()
    }
    try:
        messages: list[str] = []
        removed = sweep_orphans(client, log=messages.append)
        assert removed >= 1 and any("removed" in m for m in messages)
        left = {c.name for c in client.containers.list(all=True, filters={"label": f"pacore.test={run}"})}
        assert left == {f"pacore-test-sweep-{kind}-{run}" for kind in ("live", "foreign", "legacy")}
    finally:
        for container in containers.values():
            try:
                container.remove(force=True)
            except Exception:  # the sweep removed it
                pass
