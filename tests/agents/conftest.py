"""What the SWE tests set up alike: local tasks with their images on the daemon, and SWE-ReX servers of their own,
each at an address of its own."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from pacore_agents.swe.images import ensure_images
from pacore_agents.swe.rex_local import LocalServers
from pacore_agents.swe.tasks import load_tasks

TEST_LABEL = "pacore.test"


@pytest.fixture(scope="session")
def local_tasks(client) -> Callable[..., list[dict]]:
    """``local_tasks(*instance_ids)``: the local SWE tasks named (every one when none is), each with its image,
    built when the daemon lacks it (the base image once, by debootstrap, then a thin layer per task)."""

    def tasks(*instances: str) -> list[dict]:
        found = load_tasks("local", instances=list(instances) or None)
        ensure_images(found, client)
        return found

    return tasks


@pytest.fixture
def rex_servers(client, tmp_path):
    """``rex_servers.start(image, n)`` starts ``n`` SWE-ReX servers from ``image`` (an image pacore built), each in
    a capped host-network container on a loopback port of its own (:mod:`pacore_agents.swe.rex_local`, as
    ``pacore swe bench-hosts`` starts them); ``.token_file`` holds their token. Every container it started is
    removed afterwards, whatever the test did to it."""
    with LocalServers(client, tmp_path, labels={TEST_LABEL: str(os.getpid())}) as servers:
        yield servers
