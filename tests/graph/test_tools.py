"""PaCoReNode as the model step of a tool-calling agent: prebuilt ToolNode + tools_condition, real HTTP.

Every trajectory's request offers the bound tools; a trajectory's tool calls reach the next round as
``Tool call: name({...})`` lines; the answer carries the final trajectory's tool calls, so the loop runs them.
"""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from pacore_graph import PaCoReConfig, PaCoReNode, chat_model
from pacore_graph.synthesis.compaction import reference_text


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def weather_agent(model, config: PaCoReConfig | None = None):
    builder = StateGraph(MessagesState)
    builder.add_node("agent", PaCoReNode(model.bind_tools([get_weather]), config or PaCoReConfig(rounds=[2])))
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def calls_then_answers(body: dict, attempt: int) -> dict:
    """Before the tool ran: call get_weather (a different city per trajectory); after: answer from its output."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return {"content": f"Answer: {last['content']}."}
    city = "Paris" if "Reference" in str(last["content"]) else f"City{attempt}"
    function = {"name": "get_weather", "arguments": json.dumps({"city": city})}
    call = {"id": f"call_{city}", "type": "function", "function": function}
    return {"content": "", "tool_calls": [call]}


@pytest.mark.parametrize("client", ["chat_model", "ChatOpenAI"])
def test_a_bind_tools_model_is_the_agent_step_of_a_tool_node_loop(mock_server, client):
    with mock_server(calls_then_answers) as server:
        model = (
            chat_model(server.base_url)
            if client == "chat_model"
            else ChatOpenAI(base_url=server.base_url, api_key="none", model="mock-model")
        )
        out = weather_agent(model).invoke({"messages": [("user", "Weather in Paris?")]})
    kinds = [type(m).__name__ for m in out["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    call_step, tool_result, answer = out["messages"][1:]
    # the answer of the first step is the final trajectory's tool call, which the ToolNode ran
    assert [(c["name"], c["args"]) for c in call_step.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert isinstance(tool_result, ToolMessage) and tool_result.content == "sunny in Paris"
    assert tool_result.tool_call_id == call_step.tool_calls[0]["id"]
    assert answer.content == "Answer: sunny in Paris." and not answer.tool_calls
    # 2 steps x (2 trajectories + 1 synthesis), every request offers the tool
    assert len(server.requests) == 6
    assert all([t["function"]["name"] for t in body["tools"]] == ["get_weather"] for body in server.requests)
    # the synthesis of step 1 saw both trajectories' calls, rendered
    synthesis = [b for b in server.requests if "Reference Responses" in str(b["messages"][-1]["content"])][0]
    prompt = synthesis["messages"][-1]["content"]
    for city in ("City1", "City2"):
        assert f'Tool call: get_weather({{"city": "{city}"}})' in prompt


def test_tool_calls_render_after_the_conclusion():
    calls = [{"name": "search", "args": {"q": "é"}, "id": "1"}, {"name": "noop", "args": {}, "id": "2"}]
    assert reference_text("I will look it up.", calls) == (
        'I will look it up.\n\nTool call: search({"q": "é"})\nTool call: noop({})'
    )
    assert reference_text("", calls[1:]) == "Tool call: noop({})"
    assert reference_text("plain", []) == "plain"


@pytest.mark.embedded
def test_tool_loop_end_to_end_on_the_embedded_model(embedded_server):
    """SmolLM2-135M through llama.cpp's OpenAI server, tools offered on every request. It may or may not
    call the tool; whichever it does, the loop must end in a non-empty answer and stay consistent."""
    model = chat_model(embedded_server.base_url, max_tokens=48)
    graph = weather_agent(model, PaCoReConfig(rounds=[2], max_tokens=48))
    out = graph.invoke(
        {"messages": [("user", "Use the get_weather tool to tell me the weather in Paris.")]}, {"recursion_limit": 12}
    )
    messages = out["messages"]
    answer = messages[-1]
    assert isinstance(answer, AIMessage) and not answer.tool_calls and answer.content.strip()
    meta = answer.response_metadata
    assert meta["pacore"]["ttc"] > 0 and meta["model_name"] and meta["finish_reason"]
    for step, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:  # a call was made: the tool ran on it
            assert isinstance(messages[step + 1], ToolMessage)
            assert messages[step + 1].tool_call_id == message.tool_calls[0]["id"]
