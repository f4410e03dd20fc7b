"""A LangChain ``create_agent`` agent with a tool, its model steps run as PaCoRe: both entry points.

    python examples/langchain_agent.py                      # PaCoReChatModel in the model slot
    python examples/langchain_agent.py --middleware         # PaCoReMiddleware around an ordinary model
    python examples/langchain_agent.py "Weather in Rome?" --rounds 4

Point it at vLLM (served with tool calling) with OPENAI_BASE_URL; without it the embedded SmolLM2 server is
started (a 135M model: it may or may not call the tool). Each model step costs sum(rounds) + 1 model calls;
only the final synthesis streams.
"""

from __future__ import annotations

import argparse
import time

from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk
from langchain_core.tools import tool

from pacore_graph import PaCoReChatModel, PaCoReConfig, PaCoReMiddleware, chat_model
from pacore_graph.extend import parse_rounds


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21 degrees in {city}"


def build_agent(model=None, config: PaCoReConfig | None = None, *, middleware: bool = False):
    """A compiled agent: PaCoRe in the model slot, or as middleware around the plain model."""
    model = model or chat_model()
    config = config or PaCoReConfig(rounds=[4], max_tokens=256)
    if middleware:
        return create_agent(
            model, [get_weather], system_prompt="Use tools when they help.", middleware=[PaCoReMiddleware(config)]
        )
    return create_agent(
        PaCoReChatModel(model=model, config=config), [get_weather], system_prompt="Use tools when they help."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="What is the weather in Paris?")
    parser.add_argument("--middleware", action="store_true", help="PaCoReMiddleware instead of PaCoReChatModel")
    parser.add_argument("--rounds", type=parse_rounds, default=[4], help="e.g. 4 or 8,2")
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    agent = build_agent(config=PaCoReConfig(rounds=args.rounds, max_tokens=args.max_tokens), middleware=args.middleware)
    started = time.monotonic()
    for message, _metadata in agent.stream(
        {"messages": [("user", args.question)]}, {"recursion_limit": 12}, stream_mode="messages"
    ):
        if isinstance(message, AIMessageChunk):
            print(message.content, end="", flush=True)  # the final synthesis of each step, token by token
        elif message.type == "tool":
            print(f"\n[{message.name}] {message.content}")
    print(f"\n({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
