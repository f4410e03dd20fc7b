"""The PostgreSQL of this folder's tests is real and what pg_storage.py reads is what LangGraph's savers store:
the server the fixture started (as whom, where, with which settings), a database per test, and the sync and async
savers' rows growing with a thread and going with ``delete_thread``."""

from __future__ import annotations

import os

import psycopg
from langchain_core.messages import AIMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from pg_storage import TABLES, PostgresServer, breakdown, stored_bytes, thread_ids

REPLY = "a reply of a known length " * 8


def reply(state: MessagesState) -> dict:
    return {"messages": [AIMessage(REPLY)]}


def inner_graph():
    """A subgraph, so the thread has checkpoints in a namespace of its own (``ask:<task id>``)."""
    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile()


def chat(saver, subgraph: bool = False):
    builder = StateGraph(MessagesState)
    builder.add_node("ask", inner_graph() if subgraph else reply)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def rows(url: str, thread: str) -> dict[str, int]:
    """Rows per saver table for one thread (all namespaces)."""
    found = dict.fromkeys(TABLES, 0)
    for (table, owner, _), (count, _) in breakdown(url).items():
        if owner == thread:
            found[table] += count
    return found


def test_the_server_is_the_fixtures_own(postgres: PostgresServer, pg_url: str):
    """The cluster in the fixture's temporary folder, on loopback, fsync off, run by ``postgres`` (never root), with
    its ``pacore`` database; a test's database is empty."""
    with psycopg.connect(pg_url) as db:
        settings = {
            name: db.execute(f"SHOW {name}").fetchone()[0]
            for name in ("data_directory", "listen_addresses", "fsync", "port")
        }
        user = db.execute("SELECT current_user").fetchone()[0]
        tables = db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0]
    assert settings["data_directory"] == str(postgres.data)
    assert settings == {**settings, "listen_addresses": "127.0.0.1", "fsync": "off"}
    assert postgres.url.endswith(f":{settings['port']}") and user == "postgres" and tables == 0
    if os.geteuid() == 0:
        assert postgres.data.owner() == "postgres"
    with psycopg.connect(postgres.database_url) as db:
        assert db.execute("SELECT current_database()").fetchone()[0] == "pacore"


def test_each_test_has_a_database_of_its_own(postgres: PostgresServer, pg_url: str):
    with psycopg.connect(f"{postgres.url}/postgres") as admin:
        names = {row[0] for row in admin.execute("SELECT datname FROM pg_database")}
    assert pg_url.rsplit("/", 1)[1] in names and {"postgres", "pacore"} <= names
    assert len([name for name in names if name.startswith("test_")]) == 1, names  # earlier tests' are dropped


def test_the_sync_saver_grows_with_a_thread_and_delete_thread_empties_it(pg_url: str):
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        app = chat(saver, subgraph=True)
        sizes = [stored_bytes(pg_url)]
        for number in range(2):
            app.invoke({"messages": [("user", f"Question {number}?")]}, {"configurable": {"thread_id": "one"}})
            sizes.append(stored_bytes(pg_url, thread_id="one"))
        app.invoke({"messages": [("user", "Other?")]}, {"configurable": {"thread_id": "two"}})
        history = list(saver.list({"configurable": {"thread_id": "one", "checkpoint_ns": ""}}))
        found = rows(pg_url, "one")
        root = stored_bytes(pg_url, "one", namespace_filter="")
        nested = stored_bytes(pg_url, "one", namespace_filter=lambda namespace: namespace.startswith("ask:"))
        assert sizes[0] == 0 and sizes[0] < sizes[1] < sizes[2], sizes
        # the second turn stores its two messages again at least (the messages channel's new blob)
        assert sizes[2] - sizes[1] > 2 * len(REPLY), sizes
        assert thread_ids(pg_url) == {"one", "two"}
        assert all(found[table] > 0 for table in TABLES), found
        namespaces = {namespace for (_, thread, namespace) in breakdown(pg_url) if thread == "one"}
        assert "" in namespaces and len(namespaces) == 3, namespaces  # the root graph and one subgraph run per turn
        assert root > 0 and nested > 0 and root + nested == sizes[2]
        with psycopg.connect(pg_url) as db:
            checkpoints = db.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'one' AND checkpoint_ns = ''")
            assert checkpoints.fetchone()[0] == len(history) == 6  # per turn: the input, the start, the node's step
        saver.delete_thread("one")
    assert rows(pg_url, "one") == dict.fromkeys(TABLES, 0) and stored_bytes(pg_url, "one") == 0
    assert thread_ids(pg_url) == {"two"} and stored_bytes(pg_url) == stored_bytes(pg_url, "two") > 0


async def test_the_async_saver_grows_with_a_thread_and_delete_thread_empties_it(pg_url: str):
    async with AsyncPostgresSaver.from_conn_string(pg_url) as saver:
        await saver.setup()
        app = chat(saver)
        sizes = []
        for number in range(2):
            await app.ainvoke({"messages": [("user", f"Question {number}?")]}, {"configurable": {"thread_id": "a"}})
            sizes.append(stored_bytes(pg_url, thread_id="a"))
        state = await app.aget_state({"configurable": {"thread_id": "a"}})
        assert [message.type for message in state.values["messages"]] == ["human", "ai", "human", "ai"]
        assert 0 < sizes[0] < sizes[1], sizes
        assert {namespace for (_, _, namespace) in breakdown(pg_url)} == {""}
        assert all(count > 0 for count in rows(pg_url, "a").values())
        await saver.adelete_thread("a")
    assert thread_ids(pg_url) == set() and stored_bytes(pg_url) == 0
