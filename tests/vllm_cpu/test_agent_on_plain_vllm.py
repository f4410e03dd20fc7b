"""Strict tools on a plain ``vllm serve`` (hermes parser; no chat template of ours, no ``--tool-strict-level``), on
every entry point: the client (``chat_model``), ``PaCoReChatModel`` and ``PaCoReMiddleware`` under LangChain's
``create_agent`` with ``model_settings={"strict": True}``, and ``pacore serve`` for a ChatOpenAI client.

On such a server a forced call comes back with its arguments as an object only when its tool was sent strict;
otherwise the hermes parser hands them back as a JSON string, which no parser reads as a call. So a ``strict`` lost on
the way shows here as an agent that never reaches its tool (the control case, ``strict=False``, shows the server
does depend on it). Greedy and capped, as the other agent tests on vLLM, for one outcome per call."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain.agents.middleware import wrap_model_call
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from real_vllm import MODEL, REPLY_CAP, pacore_agent

from pacore_graph import PaCoReConfig, chat_model
from pacore_graph.extend import ServerProcess, free_port

ROUNDS = [2]
CALLED: list[str] = []
QUESTION = "What is the weather in Paris?"


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    CALLED.append(city)
    return f"sunny, 21 C in {city}"


@wrap_model_call
def strict_tool_first(request, handler):
    """The agent's first step must call ``get_weather``, its tools sent strict (LangChain's ``model_settings``)."""
    settings = {**request.model_settings, "strict": True}
    if not any(isinstance(message, ToolMessage) for message in request.messages):
        return handler(request.override(tool_choice="get_weather", model_settings=settings))
    return handler(request.override(model_settings=settings))


def test_the_plain_server_reads_a_forced_call_as_an_object_only_when_its_tool_is_strict(plain_vllm):
    base = chat_model(plain_vllm.base_url, MODEL, max_tokens=REPLY_CAP, temperature=0)
    strict = base.bind_tools([get_weather], tool_choice="get_weather", strict=True).invoke(QUESTION)
    loose = base.bind_tools([get_weather], tool_choice="get_weather", strict=False).invoke(QUESTION)
    assert strict.tool_calls and isinstance(strict.tool_calls[0]["args"].get("city"), str)
    assert not loose.tool_calls, loose  # the arguments came back as a JSON string: an invalid call


@pytest.mark.parametrize("entry", ["model", "middleware"])  # PaCoReChatModel, PaCoReMiddleware
def test_create_agent_with_strict_model_settings_reaches_its_tool(plain_vllm, entry):
    CALLED.clear()
    base = chat_model(plain_vllm.base_url, MODEL, max_tokens=REPLY_CAP, temperature=0)
    agent = pacore_agent(entry, base, [get_weather], strict_tool_first, PaCoReConfig(rounds=ROUNDS))
    out = agent.invoke({"messages": [("user", QUESTION)]}, {"recursion_limit": 8})
    results = [message for message in out["messages"] if isinstance(message, ToolMessage)]
    assert CALLED and results and results[0].content.startswith("sunny, 21 C in ")


@pytest.fixture(scope="module")
def endpoint(plain_vllm, tmp_path_factory) -> Iterator[str]:
    """``pacore serve`` in front of the plain server."""
    port = free_port()
    pacore = str(Path(sys.executable).parent / "pacore")
    command = [pacore, "serve", "--base-url", plain_vllm.base_url, "--model", MODEL, "--rounds", "2"]
    command += ["--max-tokens", str(REPLY_CAP), "--port", str(port)]
    log = tmp_path_factory.mktemp("endpoint") / "serve.log"
    server = ServerProcess("pacore serve", command, f"http://127.0.0.1:{port}", log).start()
    try:
        server.wait_ready(60)
        yield f"{server.url}/v1"
    finally:
        server.stop()


def test_pacore_serve_passes_a_clients_strict_tools_on(endpoint):
    client = ChatOpenAI(base_url=endpoint, api_key="unused", model=MODEL, temperature=0, max_retries=0)
    reply = client.bind_tools([get_weather], tool_choice="get_weather", strict=True).invoke(QUESTION)
    assert reply.tool_calls and isinstance(reply.tool_calls[0]["args"].get("city"), str), reply
