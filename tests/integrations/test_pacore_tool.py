"""``pacore_tool``: PaCoRe as a tool a cheap model decides to call, in LangChain's ``create_agent``.

Two scripted servers play the models: the cheap one runs the agent's loop and calls the tool as its script says
(its reply is a function of the request); the strong one answers the PaCoRe run's trajectories. Budgets are
refused as tool errors the cheap model reads, before the strong server sees a request.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from scripted_chat import tool_call
from waits import await_until

from pacore_graph import PaCoReConfig, PaCoReToolState, pacore_tool
from pacore_graph.integrations.spend import BudgetRefused, ToolBudget, add_spend
from pacore_graph.models import OpenAICompatibleChatModel

ROUNDS = [2]
CALLS = sum(ROUNDS) + 1
TOKENS = 20  # completion tokens of each strong reply
QUESTIONS = ["What is 17*23?", "What is 19*29?", "What is 23*31?"]


def cheap_script(calls_per_step: int = 1, steps: int = 2, tool: str = "pacore"):
    """The cheap model: asks PaCoRe ``calls_per_step`` questions at once, ``steps`` times per user turn, then reports
    the tool results it read in that turn."""

    def reply(body, attempt):
        messages = body["messages"]
        turn = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m for m in messages[turn:] if m["role"] == "tool"]
        step = len(results) // calls_per_step
        if step < steps:
            calls = [
                tool_call(tool, {"question": QUESTIONS[(step + i) % 3]}, f"call-{step}-{i}")
                for i in range(calls_per_step)
            ]
            return {"content": "", "tool_calls": calls, "finish_reason": "tool_calls"}
        return {"content": " | ".join(m["content"] for m in results)}

    return reply


def strong_reply(body, attempt):
    return {
        "content": "<think>work it out</think>The product is 391.",
        "usage": {"prompt_tokens": 30, "completion_tokens": TOKENS, "total_tokens": 30 + TOKENS},
    }


def slow_strong_reply(body, attempt):
    return {**strong_reply(body, attempt), "delay": 60}


def model(server, name):
    return OpenAICompatibleChatModel(base_url=server.base_url, model=name)


def tool_messages(messages) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def test_the_cheap_model_calls_it_once_and_the_thread_budget_refuses_the_second_call(mock_server):
    with mock_server(cheap_script()) as cheap, mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=1)
        agent = create_agent(model(cheap, "cheap"), tools=[tool], state_schema=PaCoReToolState)
        out = agent.invoke({"messages": [("user", "Two products, please.")]})
    first, second = tool_messages(out["messages"])
    assert first.status == "success" and first.content == "The product is 391."  # the answer only: no reasoning
    assert first.artifact["ttc"] == CALLS * TOKENS and first.artifact["calls"] == CALLS
    assert [r["k"] for r in first.artifact["rounds"]] == [*ROUNDS, 1]
    assert first.artifact["thread"] == {"tokens": CALLS * TOKENS, "runs": 1}
    assert second.status == "error" and "\n" not in second.content
    assert second.content.startswith("refused: this conversation's PaCoRe runs are used up (1 of 1 done)")
    assert len(strong.requests) == CALLS  # the refused call sent nothing
    assert out["messages"][-1].content == f"The product is 391. | {second.content}"  # the cheap model read both
    assert "pacore_spend" not in out  # private to the agent: neither its output nor its input


def test_the_threads_spend_survives_a_checkpointed_resume_in_a_new_agent(mock_server, tmp_path):
    """The first agent stops after its tool step (as a crash or a human-in-the-loop pause would); a new agent, tool
    and process state later, resumes the thread from the checkpoint alone and its second call is refused."""
    thread = {"configurable": {"thread_id": "conversation-1"}}
    budget = 2 * TOKENS  # round 1 spends it all: the run stops there (no synthesis), and nothing is left
    with (
        mock_server(cheap_script()) as cheap,
        mock_server(strong_reply) as strong,
        SqliteSaver.from_conn_string(str(tmp_path / "agent.db")) as saver,
    ):
        first_tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_tokens=budget)
        first = create_agent(
            model(cheap, "cheap"),
            tools=[first_tool],
            state_schema=PaCoReToolState,
            checkpointer=saver,
            interrupt_after=["tools"],
        )
        first.invoke({"messages": [("user", "Two products, please.")]}, thread)
        assert first.get_state(thread).values["pacore_spend"] == {"pacore": {"tokens": budget, "runs": 1}}
        sent = len(strong.requests)

        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_tokens=budget)
        resumed = create_agent(model(cheap, "cheap"), tools=[tool], state_schema=PaCoReToolState, checkpointer=saver)
        out = resumed.invoke(None, thread)
        spend = resumed.get_state(thread).values["pacore_spend"]
    assert sent == 2 and len(strong.requests) == sent
    answered, refused = tool_messages(out["messages"])
    assert answered.status == "success" and answered.artifact["thread"] == {"tokens": budget, "runs": 1}
    assert refused.status == "error"
    assert refused.content.startswith(f"refused: the PaCoRe token budget of this conversation is spent ({budget} of")
    assert spend == {"pacore": {"tokens": budget, "runs": 1}}


def test_parallel_calls_of_one_step_share_the_threads_runs_in_the_order_asked(mock_server):
    with mock_server(cheap_script(calls_per_step=3, steps=1)) as cheap, mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=2)
        agent = create_agent(model(cheap, "cheap"), tools=[tool], state_schema=PaCoReToolState)
        out = agent.invoke({"messages": [("user", "Three products at once.")]})
    by_id = {m.tool_call_id: m for m in tool_messages(out["messages"])}
    assert [by_id[f"call-0-{i}"].status for i in range(3)] == ["success", "success", "error"]
    assert "2 more asked for before this call" in by_id["call-0-2"].content
    assert len(strong.requests) == 2 * CALLS


def test_a_call_budget_cuts_the_run_where_its_tokens_run_out(mock_server):
    """``call_tokens`` is the run's token budget: once its finished trajectories reach it, no round starts and the
    answer comes from what finished."""
    with mock_server(cheap_script(steps=1)) as cheap, mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=[2, 2]), call_tokens=2 * TOKENS)
        agent = create_agent(model(cheap, "cheap"), tools=[tool])
        out = agent.invoke({"messages": [("user", "One product.")]})
    (message,) = tool_messages(out["messages"])
    assert message.status == "success" and message.content == "The product is 391."
    assert message.artifact["budget_tokens"] == 2 * TOKENS
    assert [r["k"] for r in message.artifact["rounds"]] == [2]  # round 1 only: the budget was spent there
    assert message.artifact["ttc"] == 2 * TOKENS and len(strong.requests) == 2


@pytest.mark.parametrize("state_schema", [None, PaCoReToolState])
def test_without_a_spend_key_the_threads_messages_keep_the_spend_through_a_resume(mock_server, tmp_path, state_schema):
    """As the issue's example has it, ``create_agent(cheap, tools=[pacore_tool(...)])``: the thread's spend is read
    from the tool's own messages (their artifacts), which the checkpoint keeps; a new agent resuming the thread
    refuses what the budget does not allow, with or without the spend key."""
    thread = {"configurable": {"thread_id": "plain"}}
    schema = {"state_schema": state_schema} if state_schema else {}
    with (
        mock_server(cheap_script()) as cheap,
        mock_server(strong_reply) as strong,
        SqliteSaver.from_conn_string(str(tmp_path / "agent.db")) as saver,
    ):
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=1)
        first = create_agent(
            model(cheap, "cheap"), tools=[tool], checkpointer=saver, interrupt_after=["tools"], **schema
        )
        first.invoke({"messages": [("user", "Two products, please.")]}, thread)
        resumed = create_agent(
            model(cheap, "cheap"),
            tools=[pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=1)],
            checkpointer=saver,
            **schema,
        )
        out = resumed.invoke(None, thread)
    answered, refused = tool_messages(out["messages"])
    assert answered.artifact["thread"] == {"tokens": CALLS * TOKENS, "runs": 1}
    assert refused.status == "error" and "runs are used up (1 of 1 done)" in refused.content
    assert len(strong.requests) == CALLS


@pytest.mark.parametrize("state_schema", [None, PaCoReToolState])
def test_the_spend_key_outlives_a_history_that_was_cleared(mock_server, state_schema):
    """A history trimmed or summarised drops the tool's messages, and with them what they recorded; the spend key
    of PaCoReToolState does not go with them."""
    thread = {"configurable": {"thread_id": "cleared"}}
    schema = {"state_schema": state_schema} if state_schema else {}
    with mock_server(cheap_script(steps=1)) as cheap, mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=1)
        agent = create_agent(model(cheap, "cheap"), tools=[tool], checkpointer=InMemorySaver(), **schema)
        agent.invoke({"messages": [("user", "One product.")]}, thread)
        agent.update_state(thread, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
        out = agent.invoke({"messages": [("user", "Another one.")]}, thread)
    (message,) = tool_messages(out["messages"])
    assert message.status == ("error" if state_schema else "success")
    assert len(strong.requests) == (1 if state_schema else 2) * CALLS


def test_thread_budgets_outside_an_agent_are_refused_as_a_mistake(mock_server):
    with mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_tokens=10_000)
        with pytest.raises(ValueError, match="count over an agent's thread, and this call has none"):
            tool.invoke({"question": "What is 17*23?"})
    assert strong.requests == []


class ModelRuns(BaseCallbackHandler):
    def __init__(self) -> None:
        self.runs: list[tuple[list[str], dict]] = []

    def on_chat_model_start(self, serialized, messages, *, tags=None, metadata=None, **kwargs) -> None:
        self.runs.append((tags or [], metadata or {}))


async def test_async_progress_reaches_the_custom_stream_and_callbacks_and_tags_reach_every_trajectory(mock_server):
    with mock_server(cheap_script(steps=1, tool="solver")) as cheap, mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), name="solver")
        agent = create_agent(model(cheap, "cheap"), tools=[tool])
        runs = ModelRuns()
        config = {"callbacks": [runs], "tags": ["mine"], "metadata": {"user": "u1"}}
        events = [
            chunk
            async for chunk in agent.astream({"messages": [("user", "One product.")]}, config, stream_mode="custom")
        ]
    assert [e["event"] for e in events if e["event"].startswith("round")] == ["round_started", "round_finished"] * 2
    assert all(e["tool"] == "solver" and e["tool_call_id"] == "call-0-0" for e in events)
    trajectories = [(tags, meta) for tags, meta in runs.runs if "pacore_round" in meta]
    assert len(trajectories) == CALLS == len(strong.requests)
    assert all("mine" in tags and "nostream" in tags and meta["user"] == "u1" for tags, meta in trajectories)


async def test_cancelling_the_agents_run_closes_the_tools_requests_upstream(mock_server):
    with mock_server(cheap_script(steps=1)) as cheap, mock_server(slow_strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=[3]))
        agent = create_agent(model(cheap, "cheap"), tools=[tool])
        run = asyncio.ensure_future(agent.ainvoke({"messages": [("user", "One product.")]}))
        await await_until(lambda: len(strong.requests) == 3, what=lambda: f"{len(strong.requests)} requests")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await await_until(lambda: strong.open_connections() == 0, what="the strong server still holds connections")
    assert strong.disconnected == 3 and len(strong.requests) == 3  # the three proposals closed; no synthesis


async def test_outside_an_agent_it_answers_and_refuses_like_any_tool(mock_server):
    with mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), description="Ask the expert.")
        assert tool.description == "Ask the expert." and tool.name == "pacore"
        assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"question", "context"}
        assert await tool.ainvoke({"question": "What is 17*23?"}) == "The product is 391."
        call = {"type": "tool_call", "id": "c1", "name": "pacore", "args": {"question": "What?", "context": "x=3"}}
        message = await tool.ainvoke(call)
        empty = tool.invoke({"type": "tool_call", "id": "c2", "name": "pacore", "args": {"question": "  "}})
    assert message.content == "The product is 391." and message.artifact["ttc"] == CALLS * TOKENS
    assert strong.requests[-1]["messages"][-1]["content"].startswith("You are given a problem")
    assert "Context:\nx=3\n\nQuestion:\nWhat?" in strong.requests[-1]["messages"][-1]["content"]
    assert empty.status == "error" and empty.content.startswith("refused: the question is empty")
    assert len(strong.requests) == 2 * CALLS


def test_the_default_description_says_when_to_call_it_and_what_it_costs():
    tool = pacore_tool(object(), PaCoReConfig.preset("high"))  # type: ignore[arg-type]
    assert "32 then 4 solutions" in tool.description and "37 model calls" in tool.description
    assert "Call it only for a sub-problem you cannot answer reliably yourself" in tool.description


def test_budgets_share_out_what_is_left_among_parallel_calls():
    budget = ToolBudget(call_tokens=500, thread_tokens=1000, thread_runs=3)
    assert budget.allowance({"tokens": 0, "runs": 0}) == 500
    assert budget.allowance({"tokens": 700, "runs": 1}, position=0, siblings=2) == 150  # 300 left, two calls
    assert budget.allowance({"tokens": 700, "runs": 2}, position=0, siblings=2) == 300  # only one may run
    with pytest.raises(BudgetRefused, match="runs are used up"):
        budget.allowance({"tokens": 700, "runs": 2}, position=1, siblings=2)
    with pytest.raises(BudgetRefused, match="token budget of this conversation is spent"):
        budget.allowance({"tokens": 1000, "runs": 1})
    assert ToolBudget().allowance({"tokens": 10**9, "runs": 10**6}) is None
    with pytest.raises(ValueError, match="thread_runs must be a positive integer"):
        ToolBudget(thread_runs=0)
    assert add_spend(
        {"a": {"tokens": 1, "runs": 1}}, {"a": {"tokens": 2, "runs": 1}, "b": {"tokens": 5, "runs": 1}}
    ) == {
        "a": {"tokens": 3, "runs": 2},
        "b": {"tokens": 5, "runs": 1},
    }


def test_in_memory_checkpoints_keep_the_spend_across_turns(mock_server):
    """Two turns of one thread: the second turn's calls see the first turn's spend."""
    thread = {"configurable": {"thread_id": "t"}}
    with mock_server(cheap_script(steps=1)) as cheap, mock_server(strong_reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=1)
        agent = create_agent(
            model(cheap, "cheap"), tools=[tool], state_schema=PaCoReToolState, checkpointer=InMemorySaver()
        )
        agent.invoke({"messages": [("user", "One product.")]}, thread)
        out = agent.invoke({"messages": [("user", "Another one.")]}, thread)
    assert [m.status for m in tool_messages(out["messages"])] == ["success", "error"]
    assert len(strong.requests) == CALLS


async def test_a_step_resumed_after_its_run_was_stopped_sends_only_what_had_not_finished(mock_server):
    """The agent is stopped while the tool's synthesis runs (its proposals finished and checkpointed); resuming the
    thread runs the tool call again, and its PaCoRe run finds the proposals on its own thread."""

    def reply(body, attempt):
        synthesis = "Reference Responses:" in body["messages"][-1]["content"]
        return {**strong_reply(body, attempt), "delay": 60 if synthesis and attempt == 1 else 0}

    thread = {"configurable": {"thread_id": "resumed"}}
    with mock_server(cheap_script(steps=1)) as cheap, mock_server(reply) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=[3]), thread_runs=1)
        agent = create_agent(
            model(cheap, "cheap"), tools=[tool], state_schema=PaCoReToolState, checkpointer=InMemorySaver()
        )
        run = asyncio.ensure_future(agent.ainvoke({"messages": [("user", "One product.")]}, thread))
        await await_until(lambda: len(strong.requests) == 4, what=lambda: f"{len(strong.requests)} requests")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        out = await agent.ainvoke(None, thread)
        spend = (await agent.aget_state(thread)).values["pacore_spend"]
    (message,) = tool_messages(out["messages"])
    assert message.status == "success" and message.artifact["calls"] == 4
    assert len(strong.requests) == 3 + 1 + 1  # the proposals once, the synthesis twice (the first was cancelled)
    assert spend == {"pacore": {"tokens": 4 * TOKENS, "runs": 1}}  # each proposal counted once


def test_a_failed_run_is_a_tool_error_of_one_line_and_counts_as_a_run(mock_server):
    with mock_server(cheap_script()) as cheap, mock_server(lambda body, attempt: (400, "no such thing")) as strong:
        tool = pacore_tool(model(strong, "strong"), PaCoReConfig(rounds=ROUNDS), thread_runs=1)
        agent = create_agent(model(cheap, "cheap"), tools=[tool])
        out = agent.invoke({"messages": [("user", "Two products, please.")]})
    failed, refused = tool_messages(out["messages"])
    assert failed.status == "error" and failed.content.startswith("failed: round 1: ") and "\n" not in failed.content
    assert failed.artifact["thread"] == {"tokens": 0, "runs": 1}
    assert refused.status == "error" and refused.content.startswith("refused: this conversation's PaCoRe runs")
    assert len(strong.requests) == 2  # round 1's two proposals, each refused once (a 400 is not retried)
