"""Any cancellation of a run closes every request it has in flight, and nothing is sent afterwards.

The scripted server holds each request and counts the clients that hang up. Cancelling once is LangGraph's
ordinary path (its cleanup cancels the tasks). Cancelling again one loop step later is what Starlette does
when a client leaves: LangGraph's cleanup task is then cancelled before it starts, so only the runner's own
teardown closes the trajectories. The sync paths (Ctrl-C) are in ``test_process_effects.py``, the
endpoint's in ``test_server_cancel.py``, budgets and early stop in ``test_coordination.py``.
"""

from __future__ import annotations

import asyncio

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph
from waits import await_until, other_tasks

from pacore_graph import PaCoReConfig, PaCoReNode, asolve, chat_model
from pacore_graph.coordination import EarlyStop
from pacore_graph.graph.runner import PaCoReRunner

HELD_SECONDS = 60.0  # far longer than any test waits: a request still open at the end was never closed


def held(body: dict, attempt: int) -> dict:
    return {"content": "\\boxed{1}", "delay": HELD_SECONDS}


async def all_closed(server, expected: int) -> None:
    """Wait until the server saw ``expected`` clients hang up, then until the run has settled: none of its tasks
    is left on this loop (a trajectory still queued for a slot would be one, and could send later) and the
    server holds no connection (whatever a client wrote has been recorded). Only then is a request count final."""
    await await_until(
        lambda: server.disconnected == expected, what=lambda: f"{server.disconnected} of {expected} requests closed"
    )
    await await_until(lambda: not other_tasks(), what=lambda: f"tasks left after the run: {other_tasks()}")
    await await_until(
        lambda: server.open_connections() == 0,
        what=lambda: f"the server still holds {server.open_connections()} connections",
    )


async def sent(server, expected: int) -> None:
    await await_until(
        lambda: len(server.requests) == expected, what=lambda: f"{len(server.requests)} of {expected} requests arrived"
    )


def node_graph(model, config: PaCoReConfig):
    builder = StateGraph(MessagesState)
    builder.add_node("pacore", PaCoReNode(model, config))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    return builder.compile()


def start(how: str, model, config: PaCoReConfig) -> asyncio.Task:
    if how == "asolve":
        work = asolve(model, "q", config)
    elif how == "arun":
        work = PaCoReRunner(model, config).arun("q")
    else:  # a graph with PaCoReNode as its model step
        work = node_graph(model, config).ainvoke({"messages": [("user", "q")]})
    return asyncio.ensure_future(work)


@pytest.mark.parametrize("cancels", [1, 2, 3])
@pytest.mark.parametrize("how", ["asolve", "arun", "graph"])
async def test_cancelling_a_run_closes_its_requests(mock_server, how, cancels):
    with mock_server(held) as server:
        model = chat_model(server.base_url)
        task = start(how, model, PaCoReConfig(rounds=[4]))
        await sent(server, 4)
        for _ in range(cancels):  # each one a loop step after the one before
            task.cancel()
            await asyncio.sleep(0)  # one loop step: the scenario (a second cancel lands before cleanup starts)
        with pytest.raises(asyncio.CancelledError):
            await task
        await all_closed(server, 4)
        await model.aclose()
    assert len(server.requests) == 4  # no synthesis was started for nobody


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param({"stream": True}, id="streamed-requests"),
        pytest.param({"answer_extractor": "boxed", "early_stop": EarlyStop(agree=3)}, id="early-stop-guard"),
    ],
)
async def test_a_run_cancelled_twice_closes_streamed_and_guarded_requests(mock_server, variant):
    with mock_server(held) as server:
        model = chat_model(server.base_url)
        task = start("arun", model, PaCoReConfig(rounds=[4], **variant))
        await sent(server, 4)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await all_closed(server, 4)
        await model.aclose()


async def test_trajectories_queued_for_a_slot_never_start_after_the_run_was_cancelled(mock_server):
    with mock_server(held) as server:
        model = chat_model(server.base_url)
        task = start("arun", model, PaCoReConfig(rounds=[4], max_concurrency=2))
        await sent(server, 2)  # two in flight, two waiting for a slot
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await all_closed(server, 2)  # the slots are free now: a queued trajectory left running would take one
        await model.aclose()
    assert len(server.requests) == 2
