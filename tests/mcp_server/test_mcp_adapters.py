"""langchain-mcp-adapters loads ``pacore mcp``'s tool into ``create_agent``, over stdio and streamable HTTP.

The agent runs in the MCP client venv (scripts/mcp-client-setup.sh, built once from PyPI and the pip cache):
langchain-mcp-adapters 0.3.x needs mcp<2, which cannot share the project's venv (mcp 2.x). So this is also the
check that an mcp 1.x client, such as most MCP hosts in use, works with the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_servers import PACORE, HttpServer, no_process_left

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).with_name("adapters_agent.py")


@pytest.fixture(scope="module")
def client_python() -> str:
    """The MCP client venv's python (set up on first use: it reaches PyPI when the pip cache lacks a wheel)."""
    setup = subprocess.run(
        ["bash", str(ROOT / "scripts" / "mcp-client-setup.sh")], capture_output=True, text=True, timeout=600
    )
    assert setup.returncode == 0, setup.stderr[-2000:]
    return setup.stdout.strip().splitlines()[-1]


def scripted(body, attempt):
    return {
        "content": "<think>17*23</think>391",
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    }


@pytest.mark.network
def test_langchain_mcp_adapters_load_the_tool_into_create_agent(client_python, mock_server):
    with mock_server(scripted) as upstream, no_process_left():
        with HttpServer("--base-url", upstream.base_url) as server:
            run = subprocess.run(
                [client_python, str(AGENT), PACORE, upstream.base_url, server.url, server.token],
                capture_output=True,
                text=True,
                timeout=300,
            )
        assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    for transport in ("stdio", "http"):
        agent = seen[transport]
        assert agent["tools"] == ["pacore_solve"]
        assert agent["arguments"] == ["context", "max_tokens", "preset", "question", "rounds"]
        assert agent["tool_status"] == "success" and agent["tool_text"] == "391"
        assert agent["answer"] == "The expert says: 391"
    assert len(upstream.requests) == 2 * (2 + 1)  # one call of rounds [2] per transport
    assert sys.executable != client_python
