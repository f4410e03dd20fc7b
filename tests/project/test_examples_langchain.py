"""The LangChain examples run as a user runs them: a fresh process pointed at a server by OPENAI_BASE_URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_chat import scripted_reply

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("script", "flags", "expected"),
    [
        ("langchain_agent.py", [], "[get_weather] sunny and 21 degrees in Paris"),
        ("langchain_agent.py", ["--middleware"], "[get_weather] sunny and 21 degrees in Paris"),
        ("deep_agent.py", ["--rounds", "2"], "model steps"),
    ],
)
def test_example_runs_against_an_openai_compatible_server(mock_server, script, flags, expected):
    with mock_server(scripted_reply) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url}
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / script), *flags],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout
    assert any("Reference Responses:" in str(m["content"]) for body in server.requests for m in body["messages"])
