"""PaCoReNode under real savers: sync and async, plain-data checkpoints, nothing of a finished PaCoRe run left
behind, and a failed round re-run by the ordinary resume (``invoke(None, config)``)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from waits import await_until

from pacore_graph import PaCoReConfig, PaCoReNode, RoundFailedError, chat_model
from pacore_graph.batch.resume import checkpoint_serde
from pacore_graph.extend import RetryPolicy

QUICK = RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0)


def chat_graph(model, saver, rounds=(3,)):
    builder = StateGraph(MessagesState)
    builder.add_node("think", PaCoReNode(model, PaCoReConfig(rounds=list(rounds), retry=QUICK)))
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    return builder.compile(checkpointer=saver)


def conclusion(body, attempt):
    return {"content": "A conclusion. " * 10, "reasoning_content": "long private reasoning " * 50}


def turn(number: int) -> dict:
    return {"messages": [("user", f"Question {number}: " + "with some context. " * 10)]}


def threads(path) -> dict[str, tuple[int, int]]:
    """(checkpoints, namespaces) per thread of a SqliteSaver file."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT thread_id, COUNT(*), COUNT(DISTINCT checkpoint_ns) FROM checkpoints GROUP BY 1")
        return {thread: (count, namespaces) for thread, count, namespaces in rows}


def test_sync_sqlite_saver_over_turns_leaves_nothing_of_finished_runs(mock_server, tmp_path, caplog):
    """Each turn's PaCoRe run checkpoints on a thread of its own while it runs (seen mid-run) and deletes it
    as it answers: the file holds the conversation's thread only, in its own namespace only."""
    path = tmp_path / "chat.sqlite"
    seen_while_running: list[set[str]] = []

    def conclusion_seen(body, attempt):
        seen_while_running.append(set(threads(path)))
        return conclusion(body, attempt)

    with mock_server(conclusion_seen) as server, SqliteSaver.from_conn_string(str(path)) as saver:
        saver.serde = checkpoint_serde()  # strict: reading back anything but plain data and messages fails
        graph = chat_graph(chat_model(server.base_url), saver)
        config = {"configurable": {"thread_id": "chat"}}
        with caplog.at_level(logging.WARNING):
            for number in range(1, 6):
                out = graph.invoke(turn(number), config)
                left = threads(path)
                assert set(left) == {"chat"} and left["chat"][1] == 1, left
            history = list(graph.get_state_history(config))
    assert len(out["messages"]) == 10 and out["messages"][-1].content.startswith("A conclusion.")
    assert len(server.requests) == 5 * 4
    assert any(any("|pacore|" in thread for thread in seen) for seen in seen_while_running)
    assert history and not [r for r in caplog.records if "unregistered" in r.getMessage().lower()]


async def test_async_sqlite_and_in_memory_savers(mock_server, tmp_path):
    with mock_server(conclusion) as server:
        model = chat_model(server.base_url)
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.sqlite")) as saver:
            saver.serde = checkpoint_serde()
            out = await chat_graph(model, saver).ainvoke(turn(1), {"configurable": {"thread_id": "a"}})
            assert out["messages"][-1].content.startswith("A conclusion.")
        memory = chat_graph(model, InMemorySaver())
        config = {"configurable": {"thread_id": "m"}}
        await memory.ainvoke(turn(1), config)
        out = memory.invoke(turn(2), config)  # the same thread, sync this time
        await model.aclose()
    assert len(out["messages"]) == 4


class Outage:
    """A server that answers 500 to the requests ``fails(body)`` picks while ``down``."""

    def __init__(self, fails):
        self.fails = fails
        self.down = True

    def __call__(self, body, attempt):
        if self.down and self.fails(body):
            return 500
        return {"content": f"conclusion {attempt}"}


def first_round(body) -> bool:
    return "Reference Responses" not in str(body["messages"][-1]["content"])


def synthesis(body) -> bool:
    return not first_round(body)


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("failing", ["first round", "final round"])
async def test_a_failed_round_is_rerun_by_the_ordinary_resume(mock_server, tmp_path, sync, failing):
    outage = Outage(first_round if failing == "first round" else synthesis)
    config = {"configurable": {"thread_id": "t"}}
    with mock_server(outage) as server:
        model = chat_model(server.base_url)
        if sync:
            with SqliteSaver.from_conn_string(str(tmp_path / "s.sqlite")) as saver:
                graph = chat_graph(model, saver)
                with pytest.raises(RoundFailedError) as caught:
                    graph.invoke(turn(1), config)
                with pytest.raises(RoundFailedError):  # still down: the resume fails the same way, no harm done
                    graph.invoke(None, config)
                sent_before = list(server.requests)
                outage.down = False
                out = graph.invoke(None, config)
        else:
            async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.sqlite")) as saver:
                graph = chat_graph(model, saver)
                with pytest.raises(RoundFailedError) as caught:
                    await graph.ainvoke(turn(1), config)
                with pytest.raises(RoundFailedError):
                    await graph.ainvoke(None, config)
                sent_before = list(server.requests)
                outage.down = False
                out = await graph.ainvoke(None, config)
            await model.aclose()
    error = caught.value
    failed_round = 0 if failing == "first round" else 1
    assert error.round_index == failed_round and error.transient
    assert [(t.index, t.error_status, t.attempts) for t in error.round.trajectories] == [
        (i, 500, 2) for i in range(error.round.k)
    ]
    resumed = server.requests[len(sent_before) :]
    if failing == "first round":  # the round again, then the synthesis
        assert len(sent_before) == 2 * 3 * 2 and [first_round(b) for b in resumed] == [True] * 3 + [False]
    else:  # round 1 was kept: only the synthesis is sent again
        assert len(sent_before) == 3 + 2 * 2 and [first_round(b) for b in resumed] == [False]
    answer = out["messages"][-1]
    assert answer.content.startswith("conclusion") and len(out["messages"]) == 2
    assert [r["k"] for r in answer.response_metadata["pacore"]["rounds"]] == [3, 1]


async def test_a_round_left_without_a_conclusion_across_an_interruption_is_run_again(mock_server, tmp_path):
    """Two trajectories saved with empty conclusions before an interruption, the other two failing on the
    resume after it: that resume reports the round failed, and the next one runs the whole round again (it
    used to raise the same error from the collector on every resume)."""
    phase = {"now": "interrupted"}

    def handler(body, attempt):
        if not first_round(body):
            return {"content": "the synthesis"}
        if phase["now"] == "interrupted":
            return {"content": "<think>only reasoning</think>"} if attempt <= 2 else {"content": "x", "delay": 60}
        return 500 if phase["now"] == "down" else {"content": f"conclusion {attempt}"}

    config = {"configurable": {"thread_id": "t"}}
    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.sqlite")) as saver:
            graph = chat_graph(model, saver, rounds=(4,))
            task = asyncio.ensure_future(graph.ainvoke(turn(1), config, durability="sync"))
            await await_until(lambda: saved_records(saver, 2), 30, what="the two empty conclusions saved")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            phase["now"] = "down"
            with pytest.raises(RoundFailedError, match="none of its 4 trajectories"):
                await graph.ainvoke(None, config)
            sent_before = len(server.requests)
            phase["now"] = "up"
            out = await graph.ainvoke(None, config)
        await model.aclose()
    assert sent_before == 4 + 2 * 2  # the two unfinished trajectories again, two attempts each
    resumed = server.requests[sent_before:]
    assert [first_round(body) for body in resumed] == [True] * 4 + [False]  # the whole round, then the synthesis
    assert out["messages"][-1].content == "the synthesis"


async def saved_records(saver, count: int) -> bool:
    """Whether ``saver`` holds at least ``count`` trajectory records as the writes of finished tasks (of any thread:
    the PaCoRe run checkpoints on a thread of its own)."""
    saved = 0
    async for item in saver.alist(None):
        writes = item.pending_writes or ()  # `begin`'s reset of the channel is an Overwrite, not a record list
        saved += sum(
            len(value) for _, channel, value in writes if channel == "trajectories" and isinstance(value, list)
        )
    return saved >= count


def synthesis_fails_once():
    failed: list[int] = []

    def handler(body, attempt):
        if synthesis(body) and not failed:
            failed.append(1)
            return 500
        return conclusion(body, attempt)

    return handler


@pytest.mark.parametrize("entry", ["chat_model", "middleware"])
@pytest.mark.parametrize("sync", [True, False])
async def test_a_model_call_retried_in_an_agent_reuses_its_proposals(mock_server, tmp_path, entry, sync):
    """create_agent with a checkpointer and LangChain's ModelRetryMiddleware around the PaCoRe call: a failed
    synthesis is retried alone (the 3 proposals are read back from the run's own thread), and once the call
    answers, the file holds the agent's thread only. Sync agents lend a sync-only SqliteSaver."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelRetryMiddleware

    from pacore_graph import PaCoReChatModel, PaCoReMiddleware

    path = tmp_path / "agent.sqlite"
    config = PaCoReConfig(rounds=[3], retry=QUICK.model_copy(update={"max_attempts": 1}))
    retry = ModelRetryMiddleware(max_retries=1, initial_delay=0.0)
    question = {"messages": [("user", "Question?")]}
    thread = {"configurable": {"thread_id": "agent"}}

    def agent(model, saver):
        if entry == "chat_model":
            return create_agent(PaCoReChatModel(model=model, config=config), [], middleware=[retry], checkpointer=saver)
        return create_agent(model, [], middleware=[retry, PaCoReMiddleware(config)], checkpointer=saver)

    with mock_server(synthesis_fails_once()) as server:
        model = chat_model(server.base_url)
        if sync:
            with SqliteSaver.from_conn_string(str(path)) as saver:
                out = agent(model, saver).invoke(question, thread)
        else:
            async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
                out = await agent(model, saver).ainvoke(question, thread)
        await model.aclose()
    assert out["messages"][-1].content.startswith("A conclusion.")
    assert len(server.requests) == 3 + 1 + 1  # the proposals once, the failed synthesis, its retry
    assert set(threads(path)) == {"agent"}
