"""A LangChain agent that loads ``pacore mcp``'s tool with langchain-mcp-adapters, as a user's agent would.

Runs in the MCP client venv (scripts/mcp-client-setup.sh: langchain-mcp-adapters on mcp 1.x), not the project's, so
it imports nothing of pacore-graph. The agent's model is scripted: it calls ``pacore_solve`` once, then answers with
what the tool said. Prints one JSON line: what each transport's agent saw.

    python adapters_agent.py PACORE_COMMAND UPSTREAM_URL HTTP_URL TOKEN
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_mcp_adapters.client import MultiServerMCPClient


class CheapModel(BaseChatModel):
    """Calls pacore_solve once, then answers with the tool's text."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> CheapModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            reply = AIMessage(f"The expert says: {results[-1].text}")
        else:
            call = {"name": "pacore_solve", "args": {"question": "What is 17*23?", "rounds": [2]}, "id": "call-1"}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


async def run(connection: dict[str, Any]) -> dict[str, Any]:
    client = MultiServerMCPClient({"pacore": connection})
    tools = await client.get_tools()
    agent = create_agent(CheapModel(), tools=tools)
    out = await agent.ainvoke({"messages": [("user", "What is 17*23? Ask the expert.")]})
    tool_message = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    return {
        "tools": [tool.name for tool in tools],
        "arguments": sorted(tools[0].args_schema["properties"]),
        "tool_status": tool_message.status,
        "tool_text": tool_message.text,
        "answer": out["messages"][-1].text,
    }


async def main(pacore: str, upstream: str, url: str, token: str) -> None:
    stdio = {"transport": "stdio", "command": pacore, "args": ["mcp", "--base-url", upstream]}
    http = {"transport": "streamable_http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    print(json.dumps({"stdio": await run(stdio), "http": await run(http)}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
