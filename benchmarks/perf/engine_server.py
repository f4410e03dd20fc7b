"""The vLLM that ``pacore bench engine`` measures: started with ``pacore serve-vllm`` as a user starts it (or one
already running), and read through its own Prometheus counters, so the figures are the engine's, not ours.

A server the benchmark starts is stopped at the end, every process it forked included: vLLM's engine cores
outlive a parent that dies, so they are listed before the stop and each one still there afterwards is killed.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import aiohttp

from pacore_graph.extend import ServerProcess, free_port

START_TIMEOUT = 600.0  # eager start-up takes about a minute on two busy cores; a cold page cache more
STOP_GRACE = 60.0

KVCACHE_GIB = "2"


def setup_vllm_executable() -> str:
    """The ``vllm`` that scripts/vllm-setup.sh installs: in ``$PACORE_VLLM_HOME`` (default
    ``~/.cache/pacore-graph/vllm``), in a venv of its own."""
    home = Path(os.environ.get("PACORE_VLLM_HOME", Path.home() / ".cache" / "pacore-graph" / "vllm"))
    return str(home / "venv" / "bin" / "vllm")


# Prometheus name -> field of Counters (each summed over its labels)
METRICS = {
    "vllm:prompt_tokens_total": "prompt",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:generation_tokens_total": "generated",
    "vllm:request_success_total": "requests",
}
_LINE = re.compile(r"^(vllm:[a-z_:]+)(?:\{[^}]*\})? ([0-9.eE+-]+)$")


@dataclass(frozen=True)
class Counters:
    """vLLM's cumulative counters at one moment; the difference of two is what happened between them."""

    prompt: float = 0.0  # prompt tokens of the requests vLLM served
    queries: float = 0.0  # prompt tokens looked up in the prefix cache
    hits: float = 0.0  # ... and found there (not computed)
    generated: float = 0.0
    requests: float = 0.0  # finished, whatever the reason

    def __sub__(self, other: Counters) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: Counters) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def computed(self) -> float:
        """Prompt tokens vLLM prefilled: those its prefix cache did not hold."""
        return self.prompt - self.hits


def parse_metrics(text: str) -> Counters:
    found = dict.fromkeys(METRICS.values(), 0.0)
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and match.group(1) in METRICS:
            found[METRICS[match.group(1)]] += float(match.group(2))
    return Counters(**found)


async def read_counters(session: aiohttp.ClientSession, root: str) -> Counters:
    async with session.get(f"{root}/metrics") as response:
        response.raise_for_status()
        return parse_metrics(await response.text())


async def settled_counters(
    session: aiohttp.ClientSession, root: str, requests: float, timeout: float = 5.0
) -> Counters:
    """The counters once vLLM has counted at least ``requests`` finished requests: it answers a request a moment
    before its metrics record it, and a reading taken in between would give that request to the next interval."""
    deadline = time.monotonic() + timeout
    while True:
        counters = await read_counters(session, root)
        if counters.requests >= requests or time.monotonic() > deadline:
            return counters
        await asyncio.sleep(0.005)


async def server_facts(session: aiohttp.ClientSession, root: str) -> dict[str, Any]:
    """vLLM's version, block size and whether prefix caching is on, as the server reports them."""
    async with session.get(f"{root}/metrics") as response:
        response.raise_for_status()
        text = await response.text()
    info = next((line for line in text.splitlines() if line.startswith("vllm:cache_config_info{")), "")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    try:
        async with session.get(f"{root}/version") as response:
            version = (await response.json()).get("version") if response.status == 200 else None
    except (aiohttp.ClientError, ValueError):
        version = None
    block = labels.get("block_size", "")
    return {
        "vllm_version": version,
        "block_size": int(block) if block.isdigit() else None,
        "prefix_caching": labels.get("enable_prefix_caching") == "True",
    }


def root_of(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


# -- a server of our own ----------------------------------------------------------------------------------------
@contextmanager
def started_vllm(model_dir: str, block_size: int, log_dir: str | None = None) -> Iterator[str]:
    """``pacore serve-vllm --port P MODEL_DIR --block-size B`` on a free loopback port; its ``/v1`` URL while the
    block runs. Its log goes to ``log_dir`` (default: a temporary folder, removed afterwards)."""
    pacore = str(Path(sys.executable).parent / "pacore")
    port = free_port()
    command = [pacore, "serve-vllm", "--port", str(port), model_dir, "--block-size", str(block_size)]
    env = {
        "PACORE_VLLM": os.environ.get("PACORE_VLLM", setup_vllm_executable()),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", KVCACHE_GIB),
    }
    with tempfile.TemporaryDirectory(prefix="pacore-bench-engine-") as scratch:
        folder = Path(log_dir or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        server = ServerProcess("pacore serve-vllm", command, f"http://127.0.0.1:{port}", folder / "vllm.log", env)
        server.start()
        try:
            server.wait_ready(START_TIMEOUT)
            yield f"{server.url}/v1"
        finally:
            stop_with_descendants(server)


def stop_with_descendants(server: ServerProcess) -> None:
    """SIGTERM to ``pacore serve-vllm`` (it stops vLLM), then SIGKILL to each of its processes still there."""
    if server.process is None:
        return
    below = descendants(server.process.pid)
    server.stop(grace=STOP_GRACE)
    deadline = time.monotonic() + 15
    while (left := [pid for pid in below if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # ours: forked by the server this benchmark started
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


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
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
