"""What the SWE tests set up alike: local tasks with their images on the daemon."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pacore_agents.swe.images import ensure_images
from pacore_agents.swe.tasks import load_tasks


@pytest.fixture(scope="session")
def local_tasks(client) -> Callable[..., list[dict]]:
    """``local_tasks(*instance_ids)``: the local SWE tasks named (every one when none is), each with its image,
    built when the daemon lacks it (the base image once, by debootstrap, then a thin layer per task)."""

    def tasks(*instances: str) -> list[dict]:
        found = load_tasks("local", instances=list(instances) or None)
        ensure_images(found, client)
        return found

    return tasks
