"""``pacore mcp --transport http`` as a user starts it (token in ``$PACORE_MCP_TOKEN``, loopback), in front of the
serving emulator, driven by the official ``mcp`` client over streamable HTTP; and what it refuses."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from mcp import MCPError
from mcp_servers import PACORE, HttpServer, Progress, text
from test_mcp_stdio import cancel_while_running, slow_emulator

from pacore_emulator import Emulator, EmulatorConfig

MODES = ["auto", "legacy"]


def quick_emulator() -> Emulator:
    return Emulator(EmulatorConfig(ttft=0.01, token_delay=0.0005, output_tokens=(20, 60)))


@pytest.mark.parametrize("mode", MODES)
async def test_listed_answered_with_progress_and_bad_arguments_refused(mode):
    with quick_emulator() as emulator, HttpServer("--base-url", emulator.base_url, "--rounds", "3") as server:
        async with server.client(mode=mode) as client:
            listed = await client.list_tools()
            progress = Progress()
            result = await client.call_tool(
                "pacore_solve", {"question": "What is 17*23?", "rounds": [2, 2]}, progress_callback=progress
            )
            refused = await client.call_tool("pacore_solve", {"question": "x", "rounds": [100]})
        stats = emulator.stats()
    assert [tool.name for tool in listed.tools] == ["pacore_solve"]
    assert not result.is_error and "\\boxed{" in text(result)
    assert [p[:2] for p in progress.seen] == [(1, 3), (2, 3), (3, 3)]
    assert result.structured_content["ttc"] == stats["tokens_out"]  # every token the upstream generated, counted
    assert refused.is_error and text(refused).startswith("refused: rounds [100] make 101 model calls")
    assert stats["requests"] == 2 + 2 + 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_call_ends_its_requests_upstream_within_seconds(mode):
    """On the 2026 wire the client cancels by closing the call's response stream; on the handshake wire it sends
    notifications/cancelled. Either way the upstream sees its requests end. With or without progress asked for."""
    with slow_emulator() as emulator, HttpServer("--base-url", emulator.base_url) as server:
        async with server.client(mode=mode) as client:
            quiet = await cancel_while_running(client, emulator, 2)
            watched = await cancel_while_running(client, emulator, 3, progress_callback=Progress())
        stats = emulator.stats()
    assert quiet < 5 and watched < 5
    assert stats["cancelled"] == 5 and stats["completed"] == 0


async def test_a_missing_or_wrong_token_is_refused_before_anything_else():
    with quick_emulator() as emulator, HttpServer("--base-url", emulator.base_url) as server:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        missing = httpx.post(server.url, json=body)
        wrong = httpx.post(server.url, json=body, headers={"Authorization": "Bearer nope"})
        with pytest.raises(ExceptionGroup) as refused:  # the SDK raises its transport's task group of errors
            async with server.client(token="nope") as client:
                await client.list_tools()
        stats = emulator.stats()
    assert missing.status_code == wrong.status_code == 401
    assert missing.json() == {"error": "this server needs a bearer token: send Authorization: Bearer <token>"}
    assert wrong.json() == {"error": "wrong bearer token"}
    assert refused.value.subgroup(MCPError) is not None  # the client could not open a session
    assert stats["requests"] == 0


@pytest.mark.parametrize(
    ("args", "env", "error"),
    [
        (["--transport", "http"], {}, "pacore mcp --transport http needs a bearer token: --token-file FILE or"),
        (["--transport", "http", "--token-file", "/nonexistent/token"], {}, "cannot read --token-file"),
        (["--token-file", "token.txt"], {}, "--token-file is for --transport http"),
        (
            ["--transport", "http", "--rounds", "32,32"],
            {"PACORE_MCP_TOKEN": "t"},
            "the default rounds [32, 32] make 65 model calls, above --max-trajectories 37",
        ),
        (["--max-calls", "0"], {}, "invalid max_calls: Input should be greater than or equal to 1"),
        (["--transport", "http", "--port", "70000"], {"PACORE_MCP_TOKEN": "t"}, "--port 70000 is not a TCP port"),
    ],
)
def test_the_command_refuses_in_one_line_before_it_starts(args, env, error, tmp_path):
    run = subprocess.run(
        [PACORE, "mcp", "--base-url", "http://127.0.0.1:9/v1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**_environment(), **env},
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"pacore: error: {error}") and run.stderr.count("\n") == 1, run.stderr


def test_a_token_file_is_read_and_the_upstream_checked_first(tmp_path):
    token = tmp_path / "token"
    token.write_text("from-a-file\n")
    run = subprocess.run(
        [PACORE, "mcp", "--transport", "http", "--token-file", str(token), "--base-url", "http://127.0.0.1:9/v1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environment(),
    )
    assert run.returncode == 1 and run.stderr.strip().startswith("pacore: error: cannot reach the model server")


def _environment() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "PACORE_MCP_TOKEN"}


@pytest.mark.embedded
async def test_on_the_embedded_model_over_http():
    with HttpServer("--rounds", "2", "--max-tokens", "32") as server:  # no --base-url: the embedded SmolLM2
        async with server.client(mode="legacy") as client:
            progress = Progress()
            result = await client.call_tool(
                "pacore_solve", {"question": "What is 2+2? Answer briefly."}, progress_callback=progress
            )
    assert not result.is_error and text(result).strip()
    assert [p[:2] for p in progress.seen] == [(1, 2), (2, 2)] and result.structured_content["calls"] == 3
