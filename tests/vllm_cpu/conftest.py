"""Real vLLM (its CPU build) for the tests of this folder: set up by scripts/vllm-setup.sh, started with
``pacore serve-vllm`` as a user would start it, and counted with vLLM's own ``/metrics`` (real_vllm.py).

One server serves the whole folder (starting it takes about half a minute) and is stopped when the folder's tests
end; nothing of it is left running. The embedded SmolLM2-135M is served under two names (the standard tests
switch models per call). A machine where vLLM's CPU build cannot run fails here with the setup's one line,
which says how to run the rest of the suite (``make test VLLM=off``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_vllm import HERE, MODEL, SECOND_NAME, START_TIMEOUT, WINDOW, VllmServer, setup_vllm
from waits import wait_until

from pacore_benchmarks.perf.engine_server import alive, descendants, setup_vllm_executable
from pacore_graph.extend import ServerProcess, free_port


def pytest_collection_modifyitems(items):
    """Every test here needs vLLM (marker ``vllm``); a module's ``EXPECTED_FAILURES`` (``{(class, test): reason}``,
    the test's name with its parameters, or without for all of them) become strict xfails: the reason is
    documented, and a pass is news."""
    for item in items:
        if HERE not in Path(item.path).parents:
            continue
        item.add_marker(pytest.mark.vllm)
        expected = getattr(item.module, "EXPECTED_FAILURES", {})
        owner = item.cls.__name__ if item.cls else ""
        reason = expected.get((owner, item.name)) or expected.get((owner, getattr(item, "originalname", item.name)))
        if reason:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture(scope="package")
def vllm() -> Iterator[VllmServer]:
    """``pacore serve-vllm DIR`` on a free loopback port, as a user starts it; SIGTERM at the end, and the test
    fails if any process it forked is still there after."""
    model_dir = setup_vllm()
    port = free_port()
    pacore = str(Path(sys.executable).parent / "pacore")
    command = [
        pacore,
        "serve-vllm",
        model_dir,
        "--port",
        str(port),
        "--served-model-name",
        MODEL,
        SECOND_NAME,
        "--block-size",
        "32",
        "--max-model-len",
        str(WINDOW),
    ]
    env = {"PACORE_VLLM": setup_vllm_executable(), "VLLM_CPU_KVCACHE_SPACE": "2"}
    yield from _served("pacore serve-vllm", command, port, model_dir, env)


@pytest.fixture(scope="module")
def plain_vllm() -> Iterator[VllmServer]:
    """``vllm serve DIR`` started plainly, as vLLM's documentation starts a model for tool calling (the hermes
    parser): none of ``pacore serve-vllm``'s additions (no chat template that shows tools, no
    ``--tool-strict-level``), so what a client sends (a tool's ``strict``) is all that decides. Module-scoped: the
    one module that needs it runs before the folder's ``vllm`` starts (its name sorts first), so the two servers are
    not up together."""
    model_dir = setup_vllm()
    port = free_port()
    command = [
        setup_vllm_executable(),
        "serve",
        model_dir,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        MODEL,
        "--max-model-len",
        str(WINDOW),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--enforce-eager",
    ]
    yield from _served("vllm serve", command, port, model_dir, {"VLLM_CPU_KVCACHE_SPACE": "2"})


def _served(name: str, command: list[str], port: int, model_dir: str, env: dict[str, str]) -> Iterator[VllmServer]:
    """The server ``command`` starts, until the fixture ends; then every process it forked must be gone."""
    log = Path(os.environ.get("PACORE_VLLM_TEST_LOG", f"/tmp/pacore-vllm-test-{port}.log"))
    log.unlink(missing_ok=True)
    server = ServerProcess(name, command, f"http://127.0.0.1:{port}", log, env).start()
    assert server.process is not None
    pid = server.process.pid
    try:
        server.wait_ready(START_TIMEOUT)
        yield VllmServer(f"{server.url}/v1", model_dir, log)
    finally:
        started = descendants(pid)
        server.stop(grace=60)
    wait_until(lambda: not [pid for pid in started if alive(pid)], 15, what=f"processes {name} left behind")
    log.unlink(missing_ok=True)
