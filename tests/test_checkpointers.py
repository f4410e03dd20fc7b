"""PaCoReNode under real savers: sync and async, plain-data checkpoints, constant size per turn, and a
failed round re-run by the ordinary resume (``invoke(None, config)``)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

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


def pacore_bytes(path) -> int:
    """Checkpoint and pending-write bytes of the PaCoRe subgraph (namespace other than the caller's)."""
    with sqlite3.connect(path) as db:
        (checkpoints,) = db.execute(
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE checkpoint_ns != ''"
        ).fetchone()
        query = "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE checkpoint_ns != ''"
        (writes,) = db.execute(query).fetchone()
    return checkpoints + writes


def test_sync_sqlite_saver_and_invoke_over_turns_with_constant_checkpoint_size(mock_server, tmp_path, caplog):
    path = tmp_path / "chat.sqlite"
    per_turn = []
    with mock_server(conclusion) as server, SqliteSaver.from_conn_string(str(path)) as saver:
        saver.serde = checkpoint_serde()  # strict: reading back anything but plain data and messages fails
        graph = chat_graph(chat_model(server.base_url), saver)
        config = {"configurable": {"thread_id": "chat"}}
        before = 0
        with caplog.at_level(logging.WARNING):
            for number in range(1, 6):
                out = graph.invoke(turn(number), config)
                after = pacore_bytes(path)
                per_turn.append(after - before)
                before = after
            history = list(graph.get_state_history(config))
    assert len(out["messages"]) == 10 and out["messages"][-1].content.startswith("A conclusion.")
    assert len(server.requests) == 5 * 4
    # the conversation is not in the PaCoRe graph's state: its checkpoints do not grow with the chat
    assert max(per_turn) - min(per_turn) < 0.02 * min(per_turn), per_turn
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
    resumed = server.requests[len(sent_before):]
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
            while len(server.requests) < 4:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # the two empty conclusions are saved
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
