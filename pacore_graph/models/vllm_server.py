"""``pacore serve-vllm``: ``vllm serve`` with the flags PaCoRe-8B needs, alone or as N replicas behind vllm-router.

One server: ``vllm serve`` on ``--port``. Several (``--replicas N``): N vLLM servers, one GPU each, on the
next N ports, and vllm-router (PyPI ``vllm-router``) on ``--port`` in front of them, with health checks,
retries and a circuit breaker. ``--emulate`` starts emulator replicas instead of vLLM (no GPU needed).
Every process runs in its own process group and is stopped on Ctrl-C; its output goes to a log folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pacore_graph.errors import PaCoReError, UsageError
from pacore_graph.models.embedded import _die_with_parent, free_port, wait_until_ready

PACORE_FLAGS = [
    "--reasoning-parser", "qwen3",  # PaCoRe-8B is Qwen3-based: reasoning in its own field, content = conclusion
    "--enable-prefix-caching",  # K trajectories share one prompt
    "--max-model-len", "131072",  # PaCoRe lets the model think up to its whole context
]  # fmt: skip

# What `pacore bench replicas` measured best for batch runs (README, "Past one GPU server"). vllm-router 0.1.17
# routes a chat completion without reading its messages: sticky_least_loaded and consistent_hash follow the
# request's session key (an X-Session-ID header, which this project's client sends: pacore_graph.models.routing)
# and send requests without one all to one replica; cache_aware sees no text at all and acts as least-loaded.
# Both keyed policies prefill a shared prompt once; sticky_least_loaded places each new key on the replica
# holding the fewest, where a hash leaves some idle. One problem at a time is answered sooner by cache_aware.
ROUTER_POLICY = "sticky_least_loaded"
ROUTER_POLICIES = ["sticky_least_loaded", "consistent_hash", "cache_aware", "power_of_two", "round_robin", "random"]
KEYLESS_NOTE = ("it routes by each request's X-Session-ID header, which pacore-graph's client sends; requests "
                "without one (ChatOpenAI, curl) all go to one replica: for such clients, and for one problem at a "
                "time (a chat bot), use --policy cache_aware")
ROUTER_FLAGS = [
    "--health-check-interval-secs", "5",  # a dead replica leaves the rotation within seconds (default 60)
    "--request-timeout-secs", "7200",  # PaCoRe trajectories think for up to an hour (default 1800)
]  # fmt: skip


def _executable(name: str) -> str | None:
    """An installed console script: next to this Python first (a venv not on PATH), then on PATH."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def vllm_command(model: str, *, port: int = 8000, host: str = "127.0.0.1", extra: list[str] | None = None) -> list[str]:
    """The ``vllm serve`` command line; flags in ``extra`` come last and so override ours."""
    executable = _executable("vllm") or "vllm"
    return [executable, "serve", model, "--host", host, "--port", str(port), *PACORE_FLAGS, *(extra or [])]


def emulator_command(replica: int, *, port: int, model: str | None = None) -> list[str]:
    """An emulated GPU replica (prefix cache, prefill cost) of the serving emulator, ``pacore_emulator``."""
    command = [sys.executable, "-m", "pacore_emulator", "--gpu-replica", str(replica),
               "--port", str(port)]  # fmt: skip
    return command + (["--model", model] if model else [])


def router_command(
    worker_urls: Sequence[str], *, port: int, host: str = "127.0.0.1", policy: str = ROUTER_POLICY,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``vllm-router`` command line; flags in ``extra`` come last and so override ours."""
    executable = _executable("vllm-router")
    if executable is None:
        raise PaCoReError("vllm-router is not installed: pip install 'pacore-graph[cluster]'")
    return [executable, "--host", host, "--port", str(port), "--worker-urls", *worker_urls, "--policy", policy,
            "--prometheus-port", str(free_port()), *ROUTER_FLAGS, *extra]  # fmt: skip


def gpu_count() -> int:
    """NVIDIA GPUs that ``nvidia-smi -L`` lists; 0 without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return 0
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU") for line in probe.stdout.splitlines()) if probe.returncode == 0 else 0


def check_vllm_available(replicas: int = 1) -> None:
    """Say clearly what is missing instead of a traceback from deep inside vLLM."""
    if importlib.util.find_spec("vllm") is None:
        raise PaCoReError("vLLM is not installed: pip install 'pacore-graph[vllm]' (needs a CUDA GPU); "
                          "--emulate runs emulated replicas without one")
    if shutil.which("nvidia-smi") is None:
        raise PaCoReError("no NVIDIA GPU found (nvidia-smi is missing): vLLM serves PaCoRe-8B on a GPU; "
                          "--emulate runs emulated replicas without one")
    found = gpu_count()
    if found < replicas:
        raise PaCoReError(f"{replicas} replicas need {replicas} GPUs, nvidia-smi lists {found}")


class ServerProcess:
    """One server in its own process group, its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, command: list[str], url: str, log: Path, env: dict[str, str] | None = None):
        self.name, self.command, self.url, self.log = name, command, url, log
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})}, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float) -> None:
        try:
            wait_until_ready(f"{self.url}/v1", timeout, self.process)
        except PaCoReError as exc:
            raise PaCoReError(f"{self.name}: {exc}\n--- {self.log} (tail) ---\n{self.log_tail()}") from None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, grace: float = 20.0) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(process, signal.SIGKILL)  # whatever the server forked (vLLM's engine cores)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Cluster:
    """N replicas (vLLM, or emulated) and vllm-router in front of them; a context manager."""

    def __init__(
        self, model: str | None, *, replicas: int, port: int = 8000, host: str = "127.0.0.1",
        policy: str = ROUTER_POLICY, emulate: bool = False, vllm_args: Sequence[str] = (),
        router_args: Sequence[str] = (), log_dir: str | None = None, ready_timeout: float = 1800.0,
    ):  # fmt: skip
        if replicas < 1:
            raise UsageError(f"--replicas must be at least 1, got {replicas}")
        if not emulate and not model:
            raise UsageError("name the model to serve, e.g. stepfun-ai/PaCoRe-8B (or pass --emulate)")
        self.model, self.replicas, self.port, self.host = model, replicas, port, host
        self.policy, self.emulate = policy, emulate
        self.vllm_args, self.router_args = list(vllm_args), list(router_args)
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="pacore-cluster-"))
        # An emulated cluster's default log folder is scratch: removed when it stops (a real one's logs are kept)
        self._scratch_logs = log_dir is None and emulate
        self.ready_timeout = ready_timeout
        self.servers: list[ServerProcess] = []

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def replica_urls(self) -> list[str]:
        return [f"http://{self.host}:{self.port + 1 + index}" for index in range(self.replicas)]

    def _replica(self, index: int, url: str) -> ServerProcess:
        port = self.port + 1 + index
        log = self.log_dir / f"replica-{index}.log"
        if self.emulate:
            return ServerProcess(f"replica {index}", emulator_command(index, port=port, model=self.model), url, log)
        command = vllm_command(self.model or "", port=port, host=self.host, extra=self.vllm_args)
        return ServerProcess(f"replica {index}", command, url, log, env={"CUDA_VISIBLE_DEVICES": str(index)})

    def start(self) -> Cluster:
        """Check everything first (a clear line, nothing started), then replicas, then the router."""
        if not self.emulate:
            check_vllm_available(self.replicas)
        urls = self.replica_urls()
        router = ServerProcess("vllm-router", router_command(urls, port=self.port, host=self.host,
                                                             policy=self.policy, extra=self.router_args),
                               f"http://{self.host}:{self.port}", self.log_dir / "router.log")  # fmt: skip
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            replicas = [self._replica(index, url) for index, url in enumerate(urls)]
            for server in replicas:
                self.servers.append(server.start())
            deadline = time.monotonic() + self.ready_timeout
            for server in replicas:
                server.wait_ready(max(1.0, deadline - time.monotonic()))
            self.servers.append(router.start())
            router.wait_ready(60.0)
        except BaseException:
            self.stop()
            raise
        return self

    def dead(self) -> ServerProcess | None:
        """The first server that has exited, if any."""
        return next((server for server in self.servers if not server.alive()), None)

    def stop(self) -> None:
        for server in reversed(self.servers):  # the router first, so no request reaches a stopping replica
            server.stop()
        self.servers = []
        if self._scratch_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_vllm(model: str, *, port: int = 8000, host: str = "127.0.0.1", extra: list[str] | None = None) -> int:
    check_vllm_available()
    return subprocess.call(vllm_command(model, port=port, host=host, extra=extra))
