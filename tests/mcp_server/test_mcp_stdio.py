"""``pacore mcp`` over stdio, driven by the official ``mcp`` client as its child process: on the scripted server
(exact requests), on the serving emulator (cancellation seen by the upstream) and on the embedded model.

Both protocol eras the SDK speaks are tried: ``auto`` negotiates the 2026 per-request protocol, ``legacy`` the
initialize handshake older clients (Claude Desktop, langchain-mcp-adapters' mcp 1.x) use."""

from __future__ import annotations

import time

import anyio
import pytest
from mcp_servers import Progress, no_process_left, stdio_client, text
from waits import await_until

from pacore_emulator import Emulator, EmulatorConfig

MODES = ["auto", "legacy"]


def scripted(body, attempt):
    return {
        "content": "<think>17*23 = 17*20 + 17*3</think>\\boxed{391}",
        "usage": {"prompt_tokens": 12, "completion_tokens": 10, "total_tokens": 22},
    }


BAD_ARGUMENTS = [
    ({}, "question is missing or empty"),
    ({"question": "   "}, "question is missing or empty"),
    ({"question": 17}, "question must be a string, not a number"),
    ({"question": "x", "preset": "extreme"}, "preset 'extreme' is unknown: choose one of low, medium, high"),
    ({"question": "x", "preset": "low", "rounds": [2]}, "give preset or rounds, not both"),
    ({"question": "x", "rounds": ["4"]}, "rounds must be a list of integers"),
    ({"question": "x", "rounds": [0]}, "round 1 asks for 0 trajectories"),
    ({"question": "x", "rounds": [32, 32]}, "make 65 model calls; this server runs at most 37 per call"),
    ({"question": "x", "max_tokens": 0}, "max_tokens must be a positive integer"),
    ({"question": "x", "max_tokens": True}, "max_tokens must be a positive integer"),
    ({"question": "x", "model": "gpt-9"}, "unknown argument 'model'"),
]


@pytest.mark.parametrize("mode", MODES)
async def test_tools_listed_a_call_answered_with_a_progress_notification_per_round(mock_server, mode):
    with mock_server(scripted) as upstream, no_process_left():
        async with stdio_client("--base-url", upstream.base_url, "--rounds", "3,2", mode=mode) as client:
            listed = await client.list_tools()
            progress = Progress()
            result = await client.call_tool(
                "pacore_solve", {"question": "What is 17*23?", "context": "Use integers."}, progress_callback=progress
            )
            preset = await client.call_tool("pacore_solve", {"question": "What is 17*23?", "preset": "low"})
    (tool,) = listed.tools
    assert tool.name == "pacore_solve" and "mock-model" in tool.description
    assert set(tool.input_schema["properties"]) == {"question", "context", "preset", "rounds", "max_tokens"}
    assert tool.input_schema["required"] == ["question"] and tool.input_schema["additionalProperties"] is False
    assert not result.is_error and text(result) == "\\boxed{391}"  # the conclusion; the reasoning stays upstream
    assert result.structured_content["ttc"] == (3 + 2 + 1) * 10 and result.structured_content["calls"] == 6
    assert [p[:2] for p in progress.seen] == [(1, 3), (2, 3), (3, 3)]
    assert progress.seen[0][2] == "round 1 of 3 finished: K=3, 30 completion tokens"
    assert preset.structured_content["calls"] == 5  # low: [4], then the synthesis
    assert len(upstream.requests) == 6 + 5
    assert "Context:\nUse integers.\n\nQuestion:\nWhat is 17*23?" in upstream.requests[0]["messages"][-1]["content"]


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_are_refused_in_one_line_before_anything_is_sent(mock_server, mode):
    with mock_server(scripted) as upstream, no_process_left():
        async with stdio_client("--base-url", upstream.base_url, mode=mode) as client:
            results = [await client.call_tool("pacore_solve", arguments) for arguments, _ in BAD_ARGUMENTS]
            unknown = await client.call_tool("solve_everything", {"question": "x"})
    for result, (arguments, expected) in zip(results, BAD_ARGUMENTS, strict=True):
        assert result.is_error, arguments
        assert text(result).startswith("refused: ") and expected in text(result) and "\n" not in text(result)
    assert unknown.is_error and text(unknown) == "unknown tool 'solve_everything': this server offers pacore_solve"
    assert upstream.requests == []


async def cancel_while_running(client, emulator: Emulator, k: int, **progress) -> float:
    """Start a call, cancel it (as a client's cancel button does) once its K proposals are running upstream, and
    return the seconds until the upstream had none left running."""
    async with anyio.create_task_group() as group:

        async def call() -> None:
            await client.call_tool("pacore_solve", {"question": "What is 17*23?", "rounds": [k]}, **progress)

        group.start_soon(call)
        await await_until(lambda: emulator.stats()["active"] == k, 30, what=lambda: f"running: {emulator.stats()}")
        started = time.monotonic()
        group.cancel_scope.cancel()
    await await_until(lambda: emulator.stats()["active"] == 0, 10, what=lambda: f"still running: {emulator.stats()}")
    return time.monotonic() - started


def slow_emulator() -> Emulator:
    """Each reply takes about 40 s: a call is surely still running when it is cancelled."""
    return Emulator(EmulatorConfig(ttft=0.01, token_delay=0.01, output_tokens=(4000, 4000)))


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_call_ends_its_requests_upstream_within_seconds(mode):
    with slow_emulator() as emulator, no_process_left():
        async with stdio_client("--base-url", emulator.base_url, mode=mode) as client:
            seconds = await cancel_while_running(client, emulator, 3)
            stats = emulator.stats()
            answered = await client.list_tools()  # the session goes on after a cancelled call
    assert seconds < 5 and stats["cancelled"] == 3 and stats["completed"] == 0 and stats["requests"] == 3
    assert answered.tools[0].name == "pacore_solve"


async def test_limits_calls_at_once_and_each_calls_budget(mock_server):
    def slow(body, attempt):
        return {**scripted(body, attempt), "delay": 1.0 if "slow" in body["messages"][-1]["content"] else 0}

    with mock_server(slow) as upstream, no_process_left():
        args = ("--base-url", upstream.base_url, "--rounds", "2,2", "--max-calls", "1", "--call-tokens", "20")
        async with stdio_client(*args) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "pacore_solve", {"question": "slow one"})
                await await_until(lambda: len(upstream.requests) == 2)
                busy = await client.call_tool("pacore_solve", {"question": "a second at once"})
            over = await client.call_tool("pacore_solve", {"question": "x", "max_tokens": 21})
            cut = await client.call_tool("pacore_solve", {"question": "fast one"})
            lowered = await client.call_tool("pacore_solve", {"question": "fast two", "max_tokens": 10})
    assert busy.is_error and text(busy).startswith("refused: busy: 1 pacore_solve calls are running")
    assert over.is_error and text(over) == "refused: max_tokens 21 is above this server's limit of 20 tokens per call"
    # the server's budget: round 1 (2 x 10 tokens) spends it, so no further round starts
    assert not cut.is_error and [r["k"] for r in cut.structured_content["rounds"]] == [2]
    assert cut.structured_content["ttc"] == 20
    # a caller's lower budget: the first finished trajectory spends it, the other is cut
    assert [r["k"] for r in lowered.structured_content["rounds"]] == [2]
    assert lowered.structured_content["ttc"] <= 20
    assert not [body for body in upstream.requests if "a second" in body["messages"][-1]["content"]]


@pytest.mark.embedded
async def test_on_the_embedded_model():
    """No --base-url: the embedded SmolLM2 is started behind the server and stopped with it."""
    with no_process_left():
        async with stdio_client("--rounds", "2", "--max-tokens", "32", mode="legacy") as client:
            progress = Progress()
            result = await client.call_tool(
                "pacore_solve", {"question": "What is 2+2? Answer briefly."}, progress_callback=progress
            )
    assert not result.is_error and text(result).strip()
    assert [p[:2] for p in progress.seen] == [(1, 2), (2, 2)]
    assert result.structured_content["calls"] == 3 and result.structured_content["ttc"] > 0
