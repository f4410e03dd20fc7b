"""One PaCoRe run in a chat thread on PostgreSQL, as a process a test can SIGKILL and start again.

    python pacore_run.py URL LOG ENTRY SAVER

ENTRY: ``node`` (``PaCoReNode`` in a ``StateGraph(MessagesState)``), ``chat_model`` (``create_agent`` with a
``PaCoReChatModel``) or ``middleware`` (``create_agent`` with ``PaCoReMiddleware``); SAVER: ``sync``
(``PostgresSaver``, ``invoke``) or ``async`` (``AsyncPostgresSaver``, ``ainvoke``). Every trajectory that
finishes appends ``[round, index]`` to LOG; round 1's six trajectories finish one after another (0.1 s + 0.4 s x
index), so a test can kill the process between two of them. A thread with work pending is resumed
(``invoke(None, config)``), as a user resumes one; the answer is printed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from pacore_graph import PaCoReChatModel, PaCoReConfig, PaCoReMiddleware, PaCoReNode
from pacore_graph.extend import Trajectory

URL, LOG, ENTRY, SAVER = sys.argv[1:5]
CONFIG = PaCoReConfig(rounds=[6])
THREAD = {"configurable": {"thread_id": "chat-1"}}


def finished(round_index: int, index: int) -> None:
    with open(LOG, "a") as log:
        log.write(json.dumps([round_index, index]) + "\n")


def delay(round_index: int, index: int) -> float:
    return 0.1 + 0.4 * index if round_index == 0 else 0.05


class SlowExplorer:
    """Trajectories that finish one after another (PaCoReNode's explorer)."""

    async def explore(self, messages, episode) -> Trajectory:
        await asyncio.sleep(delay(episode.round_index, episode.index))
        finished(episode.round_index, episode.index)
        return Trajectory(content=f"conclusion {episode.round_index}.{episode.index}", completion_tokens=1)


class SlowChatModel(BaseChatModel):
    """The same as a chat model (PaCoReChatModel's and the agent's under PaCoReMiddleware): it reads its round and
    index from the run's metadata."""

    @property
    def _llm_type(self) -> str:
        return "slow"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        round_index, index = run_manager.metadata["pacore_round"], run_manager.metadata["pacore_index"]
        time.sleep(delay(round_index, index))
        return reply(round_index, index)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        round_index, index = run_manager.metadata["pacore_round"], run_manager.metadata["pacore_index"]
        await asyncio.sleep(delay(round_index, index))
        return reply(round_index, index)


def reply(round_index: int, index: int) -> ChatResult:
    finished(round_index, index)
    usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    message = AIMessage(content=f"conclusion {round_index}.{index}", usage_metadata=usage)
    return ChatResult(generations=[ChatGeneration(message=message)])


def graph(saver):
    if ENTRY == "chat_model":
        return create_agent(PaCoReChatModel(model=SlowChatModel(), config=CONFIG), [], checkpointer=saver)
    if ENTRY == "middleware":
        return create_agent(SlowChatModel(), [], middleware=[PaCoReMiddleware(CONFIG)], checkpointer=saver)
    builder = StateGraph(MessagesState)
    builder.add_node("pacore", PaCoReNode(SlowExplorer(), CONFIG))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    return builder.compile(checkpointer=saver)


def run_sync() -> str:
    with PostgresSaver.from_conn_string(URL) as saver:
        saver.setup()
        app = graph(saver)
        pending = app.get_state(THREAD).next
        out = app.invoke(None if pending else {"messages": [("user", "hi")]}, THREAD)
    return out["messages"][-1].content


async def run_async() -> str:
    async with AsyncPostgresSaver.from_conn_string(URL) as saver:
        await saver.setup()
        app = graph(saver)
        pending = (await app.aget_state(THREAD)).next
        out = await app.ainvoke(None if pending else {"messages": [("user", "hi")]}, THREAD)
    return out["messages"][-1].content


print(run_sync() if SAVER == "sync" else asyncio.run(run_async()))
