"""A tool-calling agent whose model step is PaCoRe: the prebuilt ToolNode + tools_condition loop.

Each model step runs K trajectories that may call tools; their calls reach the synthesis as
``Tool call: name({...})`` lines; the answer carries the final trajectory's tool calls, which the
ToolNode runs. Point it at vLLM (served with tool calling) with OPENAI_BASE_URL; without it the
embedded SmolLM2 server is used, which may or may not call the tool.

    python examples/tool_agent.py "What is the weather in Paris?"
"""

from __future__ import annotations

import sys

from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from pacore_graph import PaCoReConfig, PaCoReNode, chat_model


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21 degrees in {city}"


def build_agent(model=None, config: PaCoReConfig | None = None) -> StateGraph:
    """START -> agent (PaCoRe) <-> tools; uncompiled, so callers pick their checkpointer."""
    model = (model or chat_model()).bind_tools([get_weather])
    builder = StateGraph(MessagesState)
    builder.add_node("agent", PaCoReNode(model, config or PaCoReConfig(rounds=[4], max_tokens=256)))
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


if __name__ == "__main__":
    question = sys.argv[1] if len(sys.argv) > 1 else "What is the weather in Paris?"
    out = build_agent().compile().invoke({"messages": [("user", question)]}, {"recursion_limit": 12})
    for message in out["messages"]:
        print(f"{type(message).__name__}: {message.content or message.tool_calls}")
