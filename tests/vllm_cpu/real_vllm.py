"""The real vLLM of this folder's tests: its names and settings, the running server's counters (vLLM's own
``/metrics``), its set-up (scripts/vllm-setup.sh) and what stopping it must leave behind (nothing)."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from waits import wait_until

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = "smollm2"
SECOND_NAME = "smollm2-second"
REPLY_CAP = 48  # tokens per reply: a 135M model left uncapped rambles to its context's end (24 tokens/s alone)
START_TIMEOUT = 600
# A window smaller than SmolLM2's 8192 (a flag after the model overrides the profile's): prompts that overflow it
# are quick to prefill on two cores
WINDOW = 2048


@dataclass
class VllmServer:
    """The running server: its OpenAI base URL, the folder it serves, and its counters."""

    base_url: str
    model_dir: str
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
        """Requests vLLM is running or has queued."""
        found = self.metrics()
        return found.get("vllm:num_requests_running", 0.0) + found.get("vllm:num_requests_waiting", 0.0)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until vLLM runs and queues nothing (earlier tests' requests finished or aborted)."""
        wait_until(lambda: not self.running(), timeout, what="vLLM ran or queued nothing")


def setup_vllm() -> str:
    """The model folder scripts/vllm-setup.sh prepared (it installs and converts only the first time)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-setup.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error:" in line] or done.stderr.splitlines()[-1:]
        pytest.fail(f"vLLM's CPU build is not set up: {errors[-1] if errors else done.returncode}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


def pacore_agent(entry: str, base: Any, tools: list[Any], first: Any, config: Any) -> Any:
    """LangChain's ``create_agent`` over ``base`` with ``first`` as its first middleware and PaCoRe as its model
    (``entry="model"``: ``PaCoReChatModel``) or as the middleware after ``first`` (``"middleware"``)."""
    from langchain.agents import create_agent

    from pacore_graph import PaCoReChatModel, PaCoReMiddleware

    if entry == "model":
        return create_agent(PaCoReChatModel(model=base, config=config), tools, middleware=[first])
    return create_agent(base, tools, middleware=[first, PaCoReMiddleware(config)])
