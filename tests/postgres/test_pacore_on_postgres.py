"""PaCoRe on LangGraph's production saver, PostgreSQL (Debian's server, started for these tests), sync and async:
what a finished problem stores, how a chat thread grows, what is left behind, and a SIGKILL resumed.

Sizes are read from the saver's own tables (pg_storage.py); the model is the project's mock server, answering
conclusions of a set length with reasoning the checkpoints must never hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRetryMiddleware
from langchain_core.messages import AIMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from pg_storage import stored_bytes, thread_ids
from waits import still_running, wait_until

from pacore_graph import PaCoReChatModel, PaCoReConfig, PaCoReNode, chat_model
from pacore_graph.extend import PaCoReRunner, RetryPolicy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
QUICK = RetryPolicy(max_attempts=1, initial_delay=0.0, max_delay=0.0)
CONCLUSION = "The answer follows from the two cases above, so it is 17. " * 20  # about 1.2 KB, as a few hundred tokens
REASONING = "private reasoning that no checkpoint may hold " * 200


def answer(body, attempt):
    return {"content": CONCLUSION, "reasoning_content": REASONING}


def chat(node) -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node("think", node)
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    return builder


def test_a_finished_problem_stores_each_conclusion_about_once(mock_server, pg_url):
    """[32, 4] on the PaCoRe graph's own thread: every byte the saver holds for it, against its 37 conclusions."""
    with mock_server(answer) as server, PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        model = chat_model(server.base_url)
        runner = PaCoReRunner(model, PaCoReConfig(rounds=[32, 4], retry=QUICK), checkpointer=saver)
        result = runner.run("Question?", {"configurable": {"thread_id": "problem"}})
    conclusions = sum(len(t.conclusion.encode()) for r in result.rounds for t in r.trajectories)
    assert len(server.requests) == 37 and conclusions == 37 * len(CONCLUSION.encode())
    stored = stored_bytes(pg_url, thread_id="problem")
    assert stored <= 2 * conclusions, (stored, conclusions)
    with psycopg.connect(pg_url) as db:
        dumped = b"".join(row[0] for row in db.execute("SELECT blob FROM checkpoint_writes WHERE blob IS NOT NULL"))
    assert b"private reasoning" not in dumped and b"Reference Responses" not in dumped  # Sends carry indices


@pytest.mark.parametrize("entry", ["node", "chat_model"])
async def test_a_chat_thread_grows_like_a_plain_chats_and_nothing_is_left(mock_server, pg_url, entry):
    """Three turns of PaCoRe against three turns of a plain model giving the same replies, on the async saver:
    bytes added to the conversation's thread per turn within 1.25x, and no thread but the conversation's."""

    def same_reply(_state=None):
        return AIMessage(CONCLUSION, response_metadata={"model_name": "mock-model", "finish_reason": "stop"})

    with mock_server(answer) as server:
        model = chat_model(server.base_url)
        config = PaCoReConfig(rounds=[4, 2], retry=QUICK)
        growth: dict[str, list[int]] = {}
        async with AsyncPostgresSaver.from_conn_string(pg_url) as saver:
            await saver.setup()
            if entry == "node":
                plain_node = chat(lambda state: {"messages": [same_reply()]})
                apps = {
                    "pacore": chat(PaCoReNode(model, config)).compile(checkpointer=saver),
                    "plain": plain_node.compile(checkpointer=saver),
                }
            else:  # the plain agent calls the same model: its reply (reasoning included) is the synthesis's
                apps = {
                    "pacore": create_agent(PaCoReChatModel(model=model, config=config), [], checkpointer=saver),
                    "plain": create_agent(model, [], checkpointer=saver),
                }
            for name, app in apps.items():
                thread = {"configurable": {"thread_id": name}}
                sizes = [0]
                for number in range(3):
                    await app.ainvoke({"messages": [("user", f"Question {number}?")]}, thread)
                    sizes.append(stored_bytes(pg_url, thread_id=name))
                    assert thread_ids(pg_url) <= {"pacore", "plain"}, thread_ids(pg_url)  # no run's own thread left
                growth[name] = sizes
        await model.aclose()
    for turn in (1, 2, 3):
        assert growth["pacore"][turn] <= 1.25 * growth["plain"][turn], growth


def kill_after_three(process: subprocess.Popen, log: Path, pg_url: str) -> set[tuple[int, int]]:
    """SIGKILL once three trajectories finished and the saver holds each one's record (its pending write)."""

    def three_saved() -> bool:
        logged = len(log.read_text().splitlines()) if log.exists() else 0
        return still_running(process, "the run") and logged >= 3 and saved_records(pg_url) >= logged

    wait_until(three_saved, 90, what="three trajectories finished and reached PostgreSQL")
    process.send_signal(signal.SIGKILL)
    process.wait()
    return {tuple(json.loads(line)) for line in log.read_text().splitlines()}


def saved_records(pg_url: str) -> int:
    """Trajectory records in the saver: each one write to the PaCoRe graph's ``trajectories`` by a task that
    writes no ``answer`` (``begin`` resets both)."""
    query = """SELECT COUNT(*) FROM checkpoint_writes w WHERE channel = 'trajectories' AND NOT EXISTS
               (SELECT 1 FROM checkpoint_writes a WHERE a.task_id = w.task_id AND a.channel = 'answer')"""
    try:
        with psycopg.connect(pg_url) as db:
            return db.execute(query).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


@pytest.mark.parametrize("saver", ["sync", "async"])
@pytest.mark.parametrize("entry", ["node", "chat_model", "middleware"])
def test_a_killed_run_resumes_sending_only_what_was_not_finished(pg_url, tmp_path, entry, saver):
    """Killed mid-round with three of six trajectories saved, the user's resume (``invoke(None, config)``) runs
    the other three and the synthesis, nothing twice, and leaves no thread but the conversation's."""
    script = [sys.executable, str(HERE / "pacore_run.py"), pg_url]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    process = subprocess.Popen([*script, str(first), entry, saver], cwd=ROOT, env=env)
    finished = kill_after_three(process, first, pg_url)
    assert 3 <= len(finished) < 6
    done = subprocess.run(
        [*script, str(second), entry, saver], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    again = [tuple(json.loads(line)) for line in second.read_text().splitlines()]
    assert sorted(again) == sorted({(0, i) for i in range(6)} - finished) + [(1, 0)]
    assert done.stdout.strip().splitlines()[-1] == "conclusion 1.0"
    assert thread_ids(pg_url) == {"chat-1"}


async def test_a_failed_synthesis_retried_by_middleware_reuses_the_proposals(mock_server, pg_url):
    """create_agent(PaCoReChatModel) with LangChain's ModelRetryMiddleware: the synthesis fails once, the retry
    sends the synthesis only (the four proposals are read back from the run's own thread)."""
    failures = []

    def flaky_synthesis(body, attempt):
        if "Reference Responses" in str(body["messages"][-1]["content"]) and not failures:
            failures.append(1)
            return 500
        return answer(body, attempt)

    with mock_server(flaky_synthesis) as server:
        model = chat_model(server.base_url)
        async with AsyncPostgresSaver.from_conn_string(pg_url) as saver:
            await saver.setup()
            pacore = PaCoReChatModel(model=model, config=PaCoReConfig(rounds=[4], retry=QUICK))
            agent = create_agent(
                pacore, [], middleware=[ModelRetryMiddleware(max_retries=1, initial_delay=0.0)], checkpointer=saver
            )
            out = await agent.ainvoke({"messages": [("user", "Question?")]}, {"configurable": {"thread_id": "t"}})
        await model.aclose()
    assert out["messages"][-1].content == CONCLUSION
    assert len(server.requests) == 4 + 1 + 1  # proposals once, the failed synthesis, its retry
    assert thread_ids(pg_url) == {"t"}
