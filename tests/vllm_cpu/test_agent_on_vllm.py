"""``create_agent`` with PaCoRe as its model (``PaCoReChatModel``) or as middleware, on real vLLM, reaching a tool.

A 135M model left to ``tool_choice="auto"`` seldom calls a tool, so the agent forces one on its first step with a
middleware of its own, as a user with a weak model would; the tools go out strict, so vLLM returns the call's
arguments as an object, and the tool runs with them. Greedy, as sampling at temperature 1 now and then lets the
135M model write a city string that runs to the reply cap, which leaves a cut call that no parser can read."""

from __future__ import annotations

import pytest
from langchain.agents.middleware import wrap_model_call
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from real_vllm import MODEL, REPLY_CAP, pacore_agent

from pacore_graph import PaCoReConfig, chat_model

ROUNDS = [2]
CALLED: list[dict] = []


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    CALLED.append({"city": city})
    return f"sunny, 21 C in {city}"


@wrap_model_call
def tool_first(request, handler):
    """Call a tool on the first step (no tool result yet); answer freely after."""
    if not any(isinstance(message, ToolMessage) for message in request.messages):
        request = request.override(tool_choice="required")
    return handler(request)


@pytest.mark.parametrize("entry", ["model", "middleware"])
def test_create_agent_on_vllm_reaches_its_tool(vllm, entry):
    vllm.wait_idle()
    CALLED.clear()
    base = chat_model(vllm.base_url, MODEL, max_tokens=REPLY_CAP, temperature=0)
    config = PaCoReConfig(rounds=ROUNDS)
    agent = pacore_agent(entry, base, [get_weather], tool_first, config)
    before = vllm.finished()
    out = agent.invoke({"messages": [("user", "What is the weather in Paris?")]}, {"recursion_limit": 8})
    steps = [message for message in out["messages"] if message.type == "ai"]
    results = [message for message in out["messages"] if isinstance(message, ToolMessage)]
    assert CALLED and all(isinstance(call["city"], str) for call in CALLED)  # object arguments, the tool ran
    assert results and results[0].content.startswith("sunny, 21 C in ")
    assert vllm.finished() - before == len(steps) * (sum(ROUNDS) + 1)
    assert all(step.usage_metadata["output_tokens"] > 0 for step in steps)
