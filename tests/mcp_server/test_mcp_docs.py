"""The client config of docs/mcp.md works as pasted: its ``mcpServers`` entry, with the path of this clone's
``pacore`` in place of the placeholder, started by the official client as an MCP host starts it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_servers import PACORE, no_process_left, text

DOC = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
PLACEHOLDER = "/ABSOLUTE/PATH/TO/pacore-graph/.venv/bin/pacore"


def pasted_config() -> dict:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    (config,) = [json.loads(block) for block in blocks if "mcpServers" in block]
    return config


@pytest.mark.embedded
async def test_the_documented_client_config_starts_a_server_that_answers():
    entry = pasted_config()["mcpServers"]["pacore"]
    assert entry["command"] == PLACEHOLDER
    server = StdioServerParameters(command=PACORE, args=entry["args"], env=entry.get("env"))
    with no_process_left():
        async with Client(server, mode="legacy") as client:  # the handshake Claude Desktop's client makes
            listed = await client.list_tools()
            result = await client.call_tool("pacore_solve", {"question": "Say hello.", "rounds": [1], "max_tokens": 64})
    assert [tool.name for tool in listed.tools] == ["pacore_solve"]
    assert not result.is_error and text(result).strip()
