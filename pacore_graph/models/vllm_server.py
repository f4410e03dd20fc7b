"""``pacore serve-vllm``: run ``vllm serve`` with the flags PaCoRe-8B needs."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from pacore_graph.errors import PaCoReError

PACORE_FLAGS = [
    "--reasoning-parser", "qwen3",  # PaCoRe-8B is Qwen3-based: reasoning in its own field, content = conclusion
    "--enable-prefix-caching",  # K trajectories share one prompt
    "--max-model-len", "131072",  # PaCoRe lets the model think up to its whole context
]  # fmt: skip


def vllm_command(model: str, *, port: int = 8000, host: str = "127.0.0.1", extra: list[str] | None = None) -> list[str]:
    """The ``vllm serve`` command line; flags in ``extra`` come last and so override ours."""
    executable = shutil.which("vllm", path=str(Path(sys.executable).parent)) or shutil.which("vllm") or "vllm"
    return [executable, "serve", model, "--host", host, "--port", str(port), *PACORE_FLAGS, *(extra or [])]


def check_vllm_available() -> None:
    """Say clearly what is missing instead of a traceback from deep inside vLLM."""
    if importlib.util.find_spec("vllm") is None:
        raise PaCoReError("vLLM is not installed: pip install 'pacore-graph[vllm]' (needs a CUDA GPU)")
    if shutil.which("nvidia-smi") is None:
        raise PaCoReError("no NVIDIA GPU found (nvidia-smi is missing): vLLM serves PaCoRe-8B on a GPU")
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if probe.returncode != 0 or "GPU" not in probe.stdout:
        raise PaCoReError(f"no usable NVIDIA GPU: nvidia-smi said {probe.stderr.strip() or probe.stdout.strip()}")


def serve_vllm(model: str, *, port: int = 8000, host: str = "127.0.0.1", extra: list[str] | None = None) -> int:
    check_vllm_available()
    return subprocess.call(vllm_command(model, port=port, host=host, extra=extra))
