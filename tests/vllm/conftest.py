"""Real vLLM (its CPU build) for the tests of this folder: set up by scripts/vllm-setup.sh, started with
``pacore serve-vllm`` as a user would start it, and counted with vLLM's own ``/metrics``.

One server serves the whole folder (starting it takes about a minute) and is stopped when the folder's tests
end; nothing of it is left running. The embedded SmolLM2-135M is served under two names (the standard tests
switch models per call). A machine where vLLM's CPU build cannot run fails here with the setup's one line,
which says how to run the rest of the suite (``make test VLLM=off``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pacore_graph.models.embedded import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = "smollm2"
SECOND_NAME = "smollm2-second"
REPLY_CAP = 48  # tokens per reply: a 135M model left uncapped rambles to its context's end (24 tokens/s alone)
START_TIMEOUT = 600
# A window smaller than SmolLM2's 8192 (a flag after the model overrides the profile's): prompts that overflow it
# are quick to prefill on two cores
WINDOW = 2048


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


@dataclass
class VllmServer:
    """The running server: its OpenAI base URL, the folder it serves, and its counters."""

    base_url: str
    model_dir: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus counters and gauges, each summed over its labels (``name{label="x"}`` kept too)."""
        with urllib.request.urlopen(f"{self.root}/metrics", timeout=10) as response:
            text = response.read().decode()
        found: dict[str, float] = {}
        for line in text.splitlines():
            match = re.match(r"^(vllm:[a-z_:]+)(\{[^}]*\})? ([0-9.eE+-]+)$", line)
            if not match:
                continue
            name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
            found[name] = found.get(name, 0.0) + value
            reason = re.search(r'finished_reason="(\w+)"', labels)
            if reason:
                key = f"{name}{{{reason.group(1)}}}"
                found[key] = found.get(key, 0.0) + value
        return found

    def finished(self) -> float:
        """Requests vLLM has finished (any reason: stop, length, abort, error)."""
        return self.metrics().get("vllm:request_success_total", 0.0)

    def running(self) -> float:
        return self.metrics().get("vllm:num_requests_running", 0.0) + self.metrics().get(
            "vllm:num_requests_waiting", 0.0
        )

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until vLLM runs and queues nothing (earlier tests' requests finished or aborted)."""
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not self.running(), f"vLLM still has requests after {timeout} s"


def setup_vllm() -> str:
    """The model folder scripts/vllm-setup.sh prepared (it installs and converts only the first time)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-setup.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error:" in line] or done.stderr.splitlines()[-1:]
        pytest.fail(f"vLLM's CPU build is not set up: {errors[-1] if errors else done.returncode}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


def vllm_executable() -> str:
    home = Path(os.environ.get("PACORE_VLLM_HOME", Path.home() / ".cache" / "pacore-graph" / "vllm"))
    return str(home / "venv" / "bin" / "vllm")


@pytest.fixture(scope="package")
def vllm() -> Iterator[VllmServer]:
    """``pacore serve-vllm DIR`` on a free loopback port, as a user starts it; SIGTERM at the end."""
    model_dir = setup_vllm()
    port = free_port()
    log = Path(os.environ.get("PACORE_VLLM_TEST_LOG", f"/tmp/pacore-vllm-test-{port}.log"))
    pacore = str(Path(sys.executable).parent / "pacore")
    command = [pacore, "serve-vllm", model_dir, "--port", str(port), "--served-model-name", MODEL, SECOND_NAME,
               "--block-size", "32", "--max-model-len", str(WINDOW)]  # fmt: skip
    env = {**os.environ, "PACORE_VLLM": vllm_executable(), "VLLM_CPU_KVCACHE_SPACE": "2"}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = VllmServer(f"http://127.0.0.1:{port}/v1", model_dir, process, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"pacore serve-vllm exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{server.base_url}/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM did not start within {START_TIMEOUT} s:\n{log.read_text()[-3000:]}")
                time.sleep(1)
        yield server
    finally:
        started = descendants(process.pid)
        stop(process)
    deadline = time.monotonic() + 15  # a killed process takes a moment to go
    while (left := [pid for pid in started if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"vLLM processes left behind by pacore serve-vllm: {left}"
    log.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (vLLM's API server and the engine processes it forked)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as a service manager stops ``pacore serve-vllm``; its whole group killed if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
