"""``pacore serve-vllm`` on vLLM's CPU build: started with no GPU (the fixture starts it as a user would), flags read
from the model, the context window learned from ``/v1/models``, and a clear line for what cannot be served."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from real_vllm import MODEL, SECOND_NAME, WINDOW

from pacore_benchmarks.perf.engine_server import setup_vllm_executable
from pacore_graph import PaCoReConfig
from pacore_graph.models import chat_model
from pacore_graph.models.preflight import with_model_context
from pacore_graph.models.vllm_flags import serve_profile


def test_serve_vllm_serves_the_model_with_flags_read_from_it(vllm):
    with urllib.request.urlopen(f"{vllm.base_url}/models") as response:
        listed = json.load(response)["data"]
    assert [entry["id"] for entry in listed] == [MODEL, SECOND_NAME]
    assert listed[0]["max_model_len"] == WINDOW  # the fixture's --max-model-len replaced the profile's
    announced = vllm.log.read_text(errors="replace")
    assert "pacore serve-vllm: vLLM 0.32.0 (CPU build), profile read from the model" in announced
    assert "no reasoning parser" in announced and "--enforce-eager" in announced
    command = announced.split(" vllm serve ", 1)[1].splitlines()[0]
    assert command.count("--max-model-len") == 1 and f"--max-model-len {WINDOW}" in command
    assert "yours replace --max-model-len" in announced
    profile = serve_profile(vllm.model_dir)
    assert profile.flags[profile.flags.index("--max-model-len") + 1] == "8192"  # SmolLM2's config.json
    assert "--reasoning-parser" not in profile.flags  # SmolLM2 does not think: its whole reply is the conclusion
    assert profile.flags[profile.flags.index("--tool-call-parser") + 1] == "hermes"


def test_the_context_window_is_learned_from_v1_models(vllm):
    model = chat_model(vllm.base_url, MODEL)
    assert model.profile == {"max_input_tokens": WINDOW}
    assert with_model_context(PaCoReConfig(rounds=[2], max_tokens=64), model).context_window == WINDOW


def test_a_pacore_model_gets_the_paper_profile_and_a_missing_vllm_is_one_line(tmp_path: Path):
    profile = serve_profile("stepfun-ai/PaCoRe-8B")
    assert profile.name == "pacore" and profile.flags[profile.flags.index("--max-model-len") + 1] == "131072"
    assert profile.flags[profile.flags.index("--reasoning-parser") + 1] == "qwen3"
    pacore = str(Path(sys.executable).parent / "pacore")
    missing = subprocess.run(
        [pacore, "serve-vllm", "stepfun-ai/PaCoRe-8B"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PACORE_VLLM": str(tmp_path / "vllm")},
    )
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "is not an executable" in missing.stderr and "scripts/vllm-setup.sh" in missing.stderr
    assert Path(setup_vllm_executable()).exists()
