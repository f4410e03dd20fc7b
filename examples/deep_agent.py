"""A deep agent (deepagents' ``create_deep_agent``: planning, a virtual file system, sub-agents) whose every
model step is a PaCoRe run.

    python examples/deep_agent.py "Write a haiku about parallel reasoning to haiku.txt"
    python examples/deep_agent.py --middleware ...      # PaCoReMiddleware instead of PaCoReChatModel

Point it at vLLM (served with tool calling) with OPENAI_BASE_URL; without it the embedded SmolLM2 server is
started (a 135M model: it follows the deep agent's long system prompt poorly, but the run completes).
"""

from __future__ import annotations

import argparse
import time

from deepagents import create_deep_agent

from pacore_graph import PaCoReChatModel, PaCoReConfig, PaCoReMiddleware, chat_model
from pacore_graph.extend import parse_rounds


def build_deep_agent(model=None, config: PaCoReConfig | None = None, *, middleware: bool = False):
    model = model or chat_model()
    config = config or PaCoReConfig(rounds=[2], max_tokens=256)
    if middleware:
        return create_deep_agent(model=model, middleware=[PaCoReMiddleware(config)])
    return create_deep_agent(model=PaCoReChatModel(model=model, config=config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", default="Write a haiku about parallel reasoning to haiku.txt")
    parser.add_argument("--middleware", action="store_true")
    parser.add_argument("--rounds", type=parse_rounds, default=[2])
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    agent = build_deep_agent(
        config=PaCoReConfig(rounds=args.rounds, max_tokens=args.max_tokens), middleware=args.middleware
    )
    started = time.monotonic()
    out = agent.invoke({"messages": [("user", args.task)]}, {"recursion_limit": 20})
    steps = [m for m in out["messages"] if m.type == "ai"]
    print(out["messages"][-1].content)
    print(f"files: {sorted(out.get('files') or {})}")
    tokens = sum((m.usage_metadata or {}).get("output_tokens", 0) for m in steps)
    print(
        f"({len(steps)} model steps, {tokens} completion tokens over all trajectories, "
        f"{time.monotonic() - started:.1f} s)"
    )


if __name__ == "__main__":
    main()
