import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mock_openai import MockOpenAIServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def pytest_configure(config):
    """Tests press Ctrl-C (SIGINT) on the processes they start, as a user at a terminal would. A suite started in
    the background from a script (``nohup make test &``) inherits SIGINT ignored, and so would every process it
    starts, where Python then never raises KeyboardInterrupt: give the suite's children a terminal's SIGINT."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items):
    """A docker test builds the images it needs when the daemon lacks them: the base from a Debian mirror
    (debootstrap), SWE-bench rows' images with wheels from PyPI. So it is a network test too (``-m 'not
    network'`` deselects it on a machine without those indexes); tests that download wheels say so themselves."""
    for item in items:
        if item.get_closest_marker("docker") and not item.get_closest_marker("network"):
            item.add_marker(pytest.mark.network)


@pytest.fixture
def mock_server():
    """Factory: ``with mock_server(handler) as server: ...``."""
    return MockOpenAIServer


@pytest.fixture(scope="session")
def embedded_server():
    """The real embedded SmolLM2 server, shared by the whole session (starting it takes seconds)."""
    from pacore_graph.models.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        yield server


@pytest.fixture(scope="session")
def client():
    """A Docker client; a missing daemon fails the docker tests (deselect them with -m 'not docker')."""
    from pacore_agents.swe.images import ImageBuildError, docker_client

    try:
        return docker_client()
    except ImageBuildError as exc:
        pytest.fail(f"{exc} (deselect with -m 'not docker' on machines without Docker)")


@pytest.fixture
def own_sandboxes_removed(client):
    """The test fails if it leaves one of its sandbox containers on the daemon. Only this process's containers
    are looked at (by label), and only those the test made: the daemon is shared with other runs."""
    from pacore_agents.swe.docker_sandbox import leftover_sandboxes

    before = {container.id for container in leftover_sandboxes(client)}
    yield
    left = [container.name for container in leftover_sandboxes(client) if container.id not in before]
    assert not left, f"sandbox containers left behind: {left}"
