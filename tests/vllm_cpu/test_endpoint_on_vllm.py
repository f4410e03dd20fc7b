"""``pacore serve`` in front of real vLLM, for the openai SDK: a reply with its usage, a streamed reply, a parsed
tool call, and a client that hangs up mid-stream (vLLM's running requests back to 0)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI
from real_vllm import MODEL, REPLY_CAP
from waits import wait_until

from pacore_graph.extend import ServerProcess, free_port

ROUNDS = 3  # the endpoint's default schedule: [3], so sum(K) + 1 = 4 requests upstream per call
QUESTION = [{"role": "user", "content": "Name a fruit and its colour."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def endpoint(vllm, tmp_path_factory) -> Iterator[OpenAI]:
    """``pacore serve --base-url VLLM``, started and stopped as a service manager would (SIGTERM)."""
    port = free_port()
    pacore = str(Path(sys.executable).parent / "pacore")
    command = [
        pacore,
        "serve",
        "--base-url",
        vllm.base_url,
        "--model",
        MODEL,
        "--rounds",
        str(ROUNDS),
        "--max-tokens",
        str(REPLY_CAP),
        "--port",
        str(port),
    ]
    log = tmp_path_factory.mktemp("endpoint") / "serve.log"
    server = ServerProcess("pacore serve", command, f"http://127.0.0.1:{port}", log).start()
    try:
        server.wait_ready(60)
        yield OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    finally:
        server.stop()


def generated(vllm) -> float:
    return vllm.metrics()["vllm:generation_tokens_total"]


def test_a_reply_counts_every_trajectorys_tokens(vllm, endpoint):
    vllm.wait_idle()
    before, tokens = vllm.finished(), generated(vllm)
    reply = endpoint.chat.completions.create(model=MODEL, messages=QUESTION)
    assert reply.choices[0].message.content
    assert vllm.finished() - before == ROUNDS + 1
    assert reply.usage.completion_tokens == generated(vllm) - tokens  # effective TTC: all 4 requests' tokens


def test_a_streamed_reply_with_usage(vllm, endpoint):
    vllm.wait_idle()
    before, tokens = vllm.finished(), generated(vllm)
    chunks = list(
        endpoint.chat.completions.create(
            model=f"pacore-rounds-2/{MODEL}", messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text and chunks[-1].usage is not None and not chunks[-1].choices
    assert vllm.finished() - before == 2 + 1
    assert chunks[-1].usage.completion_tokens == generated(vllm) - tokens


def test_a_tool_call_comes_back_parsed(vllm, endpoint):
    """The client's tool, forced: every trajectory calls it (vLLM's hermes parser), the synthesis too, and the
    client gets one call whose arguments are a JSON object that names a city.

    Greedy: sampled at temperature 1, the 135M model now and then writes a city string that runs to the reply cap,
    and vLLM then answers the cut call as text (finish_reason "length"), as it would without PaCoRe."""
    vllm.wait_idle()
    reply = endpoint.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"  # finish_reason "stop", as vLLM and OpenAI give for a named tool
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict) and isinstance(arguments["city"], str)


def test_a_client_that_hangs_up_mid_stream_stops_vllm(vllm, endpoint):
    vllm.wait_idle()
    stream = endpoint.chat.completions.create(
        model=f"pacore-rounds-2/{MODEL}",
        messages=QUESTION,
        stream=True,
        max_tokens=1500,
        extra_body={"min_tokens": 1500},
    )
    running = vllm.metrics
    wait_until(lambda: running().get("vllm:num_requests_running", 0) >= 2, 60, what="the proposals reached vLLM")
    stream.close()  # the client hangs up
    wait_until(lambda: vllm.running() == 0, 5, what=lambda: f"vLLM still runs {vllm.running()} requests")
