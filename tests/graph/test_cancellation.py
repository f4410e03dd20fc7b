"""Any cancellation of a run closes every request it has in flight, and nothing is sent afterwards.

The scripted server holds each request and counts the clients that hang up. Cancelling once is LangGraph's
ordinary path (its cleanup cancels the tasks). Cancelling again one loop step later is what Starlette does
when a client leaves: LangGraph's cleanup task is then cancelled before it starts, so only the runner's own
teardown closes the trajectories. The sync paths (Ctrl-C) are in ``test_process_effects.py``, the
endpoint's in ``test_server_cancel.py``, budgets and early stop in ``test_coordination.py``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph

from pacore_graph import PaCoReConfig, PaCoReNode, asolve, chat_model
from pacore_graph.coordination import EarlyStop
from pacore_graph.graph.runner import PaCoReRunner

HELD_SECONDS = 60.0  # far longer than any test waits: a request still open at the end was never closed


def held(body: dict, attempt: int) -> dict:
    return {"content": "\\boxed{1}", "delay": HELD_SECONDS}


async def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return condition()


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
        assert await wait_for(lambda: len(server.requests) == 4)
        for _ in range(cancels):  # each one a loop step after the one before
            task.cancel()
            await asyncio.sleep(0)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_for(lambda: server.disconnected == 4), f"{server.disconnected} of 4 requests closed"
        await asyncio.sleep(0.3)
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
        assert await wait_for(lambda: len(server.requests) == 4)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_for(lambda: server.disconnected == 4), f"{server.disconnected} of 4 requests closed"
        await model.aclose()


async def test_trajectories_queued_for_a_slot_never_start_after_the_run_was_cancelled(mock_server):
    with mock_server(held) as server:
        model = chat_model(server.base_url)
        task = start("arun", model, PaCoReConfig(rounds=[4], max_concurrency=2))
        assert await wait_for(lambda: len(server.requests) == 2)  # two in flight, two waiting for a slot
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_for(lambda: server.disconnected == 2)
        await asyncio.sleep(0.5)  # the slots are free now: a queued trajectory left running would take one
        await model.aclose()
    assert len(server.requests) == 2
