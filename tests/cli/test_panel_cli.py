"""``pacore solve --panel FILE`` and ``pacore serve --panel FILE`` as a user runs them, in front of two emulated
servers (each its own request log): which requests went where, what the commands print per model, and the panel
files refused before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from waits import still_running, wait_until

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph.extend import free_port

PROBLEM = "What is 17 * 3?"


def pacore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pacore_graph.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def serving(process: subprocess.Popen[str], url: str) -> bool:
    try:
        return still_running(process, "pacore serve") and httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def emulators(tmp_path: Path) -> tuple[Emulator, Emulator]:
    def one(name: str) -> Emulator:
        log = tmp_path / f"{name}.jsonl"
        return Emulator(EmulatorConfig(model=name, ttft=0.01, output_tokens=30, request_log=str(log)))

    return one("small-model"), one("strong-model")


def logged(emulator: Emulator) -> list[dict]:
    path = Path(emulator.config.request_log)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def panel_file(tmp_path: Path, small: Emulator, strong: Emulator, **extra) -> str:
    panel = {
        "models": {
            "small": {"base_url": small.base_url, "weight": 2},
            "strong": {"base_url": strong.base_url, "model": "strong-model", "api_key_env": "STRONG_KEY"},
        },
        "synthesizer": "strong",
        **extra,
    }
    path = tmp_path / "panel.json"
    path.write_text(json.dumps(panel))
    return str(path)


def test_pacore_solve_with_a_panel_sends_each_slot_to_its_server_and_says_so_per_model(tmp_path, monkeypatch):
    small, strong = emulators(tmp_path)
    with small, strong:
        panel = panel_file(tmp_path, small, strong)
        env = {**os.environ, "STRONG_KEY": "k-strong"}
        done = pacore("solve", PROBLEM, "--panel", panel, "--rounds", "6", "--output", str(tmp_path / "run"), env=env)
        assert done.returncode == 0, done.stderr
        row = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[0])
        models = Counter(t["model"] for r in row["rounds"] for t in r["trajectories"])
        assert models == {"small": 4, "strong": 3}  # weights 2:1 over 6, then the synthesis
        assert len(logged(small)) == 4 and len(logged(strong)) == 3
        assert all(entry["body"]["model"] == "strong-model" for entry in logged(strong))
        assert "small: 4 trajectories (4 requests)" in done.stderr and "strong: 3 trajectories" in done.stderr
        shown = pacore("show", str(tmp_path / "run"))
        assert "panel " in shown.stdout and "strong: 3 trajectories (3 requests)" in shown.stdout
        settings = json.loads((tmp_path / "run" / "run.json").read_text())["fingerprint"]
        assert settings["model"]["strong"] == {
            "base_url": strong.base_url,
            "model": "strong-model",
            "api_key_env": "STRONG_KEY",
        }
        assert "k-strong" not in (tmp_path / "run" / "run.json").read_text()
        again = pacore("solve", PROBLEM, "--panel", panel, "--rounds", "6", "--output", str(tmp_path / "run"), env=env)
        assert again.returncode == 0 and "answered before" in again.stderr
        assert len(logged(small)) + len(logged(strong)) == 7


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda p: p["models"]["strong"].update(api_key="sk-1"), "keys are never written in a file"),
        (lambda p: p.pop("synthesizer"), "needs a synthesizer"),
        (lambda p: p["models"]["small"].update(weight=-1), "models.small.weight"),
        (lambda p: p.update(rounds=[["small"]]), "maps 1 slots, and round 1 has 4"),
    ],
)
def test_a_bad_panel_file_is_one_line_before_anything_starts(tmp_path, edit, said):
    panel = {
        "models": {"small": {"base_url": "http://127.0.0.1:9/v1"}, "strong": {"base_url": "http://127.0.0.1:9/v1"}},
        "synthesizer": "strong",
    }
    edit(panel)
    path = tmp_path / "panel.json"
    path.write_text(json.dumps(panel))
    done = pacore("solve", PROBLEM, "--panel", str(path))
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_panel_flags_that_contradict_it_and_a_key_variable_unset_are_refused(tmp_path):
    path = tmp_path / "panel.json"
    models = {"a": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "PANEL_TEST_UNSET_KEY"}}
    path.write_text(json.dumps({"models": models}))
    mixed = pacore("solve", PROBLEM, "--panel", str(path), "--base-url", "http://127.0.0.1:9/v1")
    assert mixed.returncode == 2 and "leave out --base-url" in mixed.stderr
    unset = pacore("solve", PROBLEM, "--panel", str(path))
    assert unset.returncode == 2 and "$PANEL_TEST_UNSET_KEY is not set" in unset.stderr


def test_pacore_serve_with_a_panel_of_upstreams(tmp_path):
    small, strong = emulators(tmp_path)
    port = free_port()
    with small, strong:
        panel = panel_file(tmp_path, small, strong)
        env = {**os.environ, "STRONG_KEY": "k-strong"}
        process = subprocess.Popen(
            [sys.executable, "-m", "pacore_graph.cli", "serve", "--panel", panel, "--rounds", "3", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            wait_until(lambda: serving(process, f"http://127.0.0.1:{port}/health"), 60, what="pacore serve answered")
            client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
            assert [m.id for m in client.models.list()][0] == "panel"
            reply = client.chat.completions.create(model="panel", messages=[{"role": "user", "content": PROBLEM}])
            account = reply.usage.model_extra["pacore"]["models"]
            assert account["small"]["trajectories"] == len(logged(small)) == 2
            assert account["strong"]["trajectories"] == len(logged(strong)) == 2  # one slot and the synthesis
        finally:
            process.terminate()
            _, err = process.communicate(timeout=30)
    assert "serving a PaCoRe panel" in err and "k-strong" not in err
