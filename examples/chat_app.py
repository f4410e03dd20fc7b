"""A chat graph whose model call is PaCoRe: what ``langgraph dev`` serves (see langgraph.json).

Point it at vLLM with OPENAI_BASE_URL (and optionally PACORE_MODEL, PACORE_ROUNDS=32,4, PACORE_MAX_TOKENS): in the
environment, or for ``langgraph dev`` in ``.env`` (template: ``.env.example``); without OPENAI_BASE_URL the embedded
SmolLM2 server is started.
"""

from __future__ import annotations

import asyncio
import functools
import os

from langgraph.graph import END, START, MessagesState, StateGraph

from pacore_graph import PaCoReConfig, PaCoReNode, chat_model
from pacore_graph.extend import parse_rounds


def build_chat_graph(model=None, config: PaCoReConfig | None = None) -> StateGraph:
    """START -> pacore -> END over MessagesState; uncompiled, so callers pick their checkpointer."""
    model = model or chat_model(model=os.environ.get("PACORE_MODEL"))
    max_tokens = os.environ.get("PACORE_MAX_TOKENS")
    config = config or PaCoReConfig(
        rounds=parse_rounds(os.environ.get("PACORE_ROUNDS", "4")), max_tokens=int(max_tokens) if max_tokens else None
    )
    builder = StateGraph(MessagesState)
    builder.add_node("pacore", PaCoReNode(model, config))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    return builder


@functools.cache
def _served_model():
    return chat_model(model=os.environ.get("PACORE_MODEL"))


async def make_graph():
    """Factory for ``langgraph dev``; starting the embedded server blocks, so it runs in a thread, once."""
    model = await asyncio.to_thread(_served_model)
    return build_chat_graph(model).compile()


if __name__ == "__main__":
    graph = build_chat_graph().compile()
    out = graph.invoke({"messages": [("user", "What is 17*23?")]})
    print(out["messages"][-1].content)
