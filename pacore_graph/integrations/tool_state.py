"""``PaCoReToolState``: the agent state that keeps what ``pacore_tool`` spent in the thread (needs ``langchain``).

``create_agent(cheap_model, tools=[pacore_tool(...)], state_schema=PaCoReToolState, checkpointer=...)``: the
``pacore_spend`` key holds each PaCoRe tool's spend (tokens, runs), added up call by call, checkpointed with the
conversation. Without it the tool counts its own messages of the thread, which a trimmed or summarised history
loses; the key stays. It is private to the agent (neither its input nor its output), so a caller cannot reset it
by passing a value. An agent with a state of its own subclasses both.
"""

from __future__ import annotations

from typing import Annotated, NotRequired

from langchain.agents import AgentState
from langchain.agents.middleware.types import PrivateStateAttr

from pacore_graph.integrations.spend import Spend, add_spend


class PaCoReToolState(AgentState):
    """``AgentState`` plus ``pacore_spend``: per tool name, the effective TTC and runs spent in this thread."""

    pacore_spend: NotRequired[Annotated[dict[str, Spend], PrivateStateAttr, add_spend]]
