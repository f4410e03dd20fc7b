"""PaCoRe in LangChain's model slot: PaCoReChatModel and PaCoReMiddleware under create_agent, the prebuilt ReAct
agent, deep agents, supervisors and LCEL, over the scripted server (each model step: sum(K) + 1 requests)."""

from __future__ import annotations

import asyncio

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel
from scripted_chat import scripted_reply

from pacore_graph import PaCoReChatModel, PaCoReConfig, PaCoReMiddleware
from pacore_graph.models import OpenAICompatibleChatModel

ROUNDS = [3]
CALLS = sum(ROUNDS) + 1


@tool
def get_weather(location: str) -> str:
    """The weather somewhere."""
    return f"sunny in {location}"


class Weather(BaseModel):
    location: str
    summary: str


def synthesis(body) -> bool:
    """A synthesis request: its last user message is the template over the references."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    return "Reference Responses:" in str(users[-1]["content"])


class Starts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[tuple[list[str], dict]] = []

    def on_chat_model_start(self, serialized, messages, *, tags=None, metadata=None, **kwargs) -> None:
        self.starts.append((tags or [], metadata or {}))


def agents(base, **kwargs):
    """The two entry points, built as a user would."""
    config = PaCoReConfig(rounds=ROUNDS)
    return {
        "model": create_agent(PaCoReChatModel(model=base, config=config), [get_weather], **kwargs),
        "middleware": create_agent(base, [get_weather], middleware=[PaCoReMiddleware(config)], **kwargs),
    }


@pytest.mark.parametrize("entry", ["model", "middleware"])
def test_create_agent_step_is_a_pacore_run_that_offers_the_tools_and_streams_only_the_answer(mock_server, entry):
    with mock_server(scripted_reply) as server:
        agent = agents(OpenAICompatibleChatModel(base_url=server.base_url, model="m"), system_prompt="Be brief.")[entry]
        starts = Starts()
        streamed = list(
            agent.stream(
                {"messages": [("user", "What is the weather in Paris?")]},
                {"callbacks": [starts], "tags": ["mine"], "metadata": {"user": "u1"}},
                stream_mode="messages",
            )
        )
    assert len(server.requests) == 2 * CALLS  # two model steps (tool call, then answer)
    assert sum(map(synthesis, server.requests)) == 2
    assert all(body["messages"][0] == {"role": "system", "content": "Be brief."} for body in server.requests)
    assert all([t["function"]["name"] for t in body["tools"]] == ["get_weather"] for body in server.requests)
    model_tokens = [m for m, meta in streamed if isinstance(m, AIMessageChunk) and meta["langgraph_node"] == "model"]
    assert "".join(str(m.content) for m in model_tokens) == "The tool answered: sunny in Paris"  # once, no proposal
    proposals = [(tags, meta) for tags, meta in starts.starts if "pacore_round" in meta]
    assert len(proposals) == 2 * CALLS
    assert all("mine" in tags and meta["user"] == "u1" for tags, meta in proposals)
    assert all("nostream" in tags for tags, meta in proposals if meta["pacore_round"] == 0)


@pytest.mark.parametrize("entry", ["model", "middleware"])
async def test_create_agent_async_with_structured_response_and_usage_of_every_trajectory(mock_server, entry):
    with mock_server(scripted_reply) as server:
        agent = agents(OpenAICompatibleChatModel(base_url=server.base_url, model="m"), response_format=Weather)[entry]
        out = await agent.ainvoke({"messages": [("user", "What is the weather in 'Paris'? Use the tool.")]})
    assert isinstance(out["structured_response"], Weather)
    answers = [m for m in out["messages"] if m.type == "ai"]
    assert all(m.usage_metadata["output_tokens"] == 7 * CALLS for m in answers)
    assert all(len(m.response_metadata["pacore"]["rounds"]) == len(ROUNDS) + 1 for m in answers)
    assert len(server.requests) == len(answers) * CALLS


@pytest.mark.parametrize("entry", ["model", "middleware"])
def test_two_turns_on_a_sync_sqlite_saver(mock_server, tmp_path, entry):
    with mock_server(scripted_reply) as server, SqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        agent = agents(OpenAICompatibleChatModel(base_url=server.base_url, model="m"), checkpointer=saver)[entry]
        thread = {"configurable": {"thread_id": "t1"}}
        agent.invoke({"messages": [("user", "What is the weather in Paris?")]}, thread)
        out = agent.invoke({"messages": [("user", "hello")]}, thread)
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai", "human", "ai"]
    assert len(server.requests) == 3 * CALLS
    assert server.requests[-1]["messages"][0]["content"] == "What is the weather in Paris?"  # the thread's history


def test_prebuilt_react_agent_supervisor_and_lcel(mock_server):
    from langgraph.prebuilt import create_react_agent
    from langgraph_supervisor import create_supervisor

    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        react = create_react_agent(model, [get_weather])
        out = react.invoke({"messages": [("user", "What is the weather in Paris?")]})
        assert out["messages"][-1].content == "The tool answered: sunny in Paris"
        chain = ChatPromptTemplate.from_messages([("user", "{question}")]) | model | StrOutputParser()
        assert chain.invoke({"question": "hello"}) == "Hello! I am a scripted model, and I am doing well."
        before = len(server.requests)
        worker = create_react_agent(model, [get_weather], name="weather_expert")
        supervisor = create_supervisor([worker], model=model).compile()
        out = supervisor.invoke({"messages": [("user", "What is the weather in Paris?")]})
        assert out["messages"][-1].type == "ai" and (len(server.requests) - before) % CALLS == 0
        assert len(server.requests) > before + CALLS
    assert len(server.requests) == 2 * CALLS + CALLS + (len(server.requests) - 3 * CALLS)


def test_deep_agent_runs_its_model_steps_as_pacore(mock_server):
    from deepagents import create_deep_agent

    with mock_server(scripted_reply) as server:
        base = OpenAICompatibleChatModel(base_url=server.base_url, model="m")
        for agent in (
            create_deep_agent(
                model=PaCoReChatModel(model=base, config=PaCoReConfig(rounds=ROUNDS)), tools=[get_weather]
            ),
            create_deep_agent(
                model=base, tools=[get_weather], middleware=[PaCoReMiddleware(PaCoReConfig(rounds=ROUNDS))]
            ),
        ):
            before = len(server.requests)
            out = agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
            sent = server.requests[before:]
            assert out["messages"][-1].content == "The tool answered: sunny in Paris"
            assert len(sent) == 2 * CALLS and sum(map(synthesis, sent)) == 2
            offered = {t["function"]["name"] for t in sent[0]["tools"]}
            assert {"get_weather", "ls", "read_file", "write_file", "task"} <= offered


def test_chat_model_reply_usage_streaming_and_sync_call_inside_a_running_loop(mock_server):
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        reply = model.invoke("hello")
        chunks = list(model.stream("hello"))

        async def sync_call_in_a_loop():
            return model.invoke("hello")  # a notebook cell does this: it must not deadlock

        in_loop = asyncio.run(sync_call_in_a_loop())
        batch = model.batch(["hello", "hey"])
    assert reply.content == in_loop.content == "Hello! I am a scripted model, and I am doing well."
    assert reply.additional_kwargs["reasoning_content"] == "The user greets me; I greet back."
    assert reply.usage_metadata["output_tokens"] == 7 * CALLS
    assert reply.response_metadata["pacore"]["ttc"] == 7 * CALLS and reply.response_metadata["model_name"] == "m"
    whole = sum(chunks[1:], chunks[0])
    assert len(chunks) > 3 and whole.content == reply.content and whole.usage_metadata == reply.usage_metadata
    assert [m.content for m in batch] == [reply.content] * 2
    assert len(server.requests) == 5 * CALLS


def test_middleware_position_decides_what_it_wraps(mock_server):
    from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware

    class Count(AgentMiddleware):
        def __init__(self, name: str):
            super().__init__()
            self.calls = 0
            self._name = name

        @property
        def name(self) -> str:
            return self._name

        def wrap_model_call(self, request, handler):
            self.calls += 1
            return handler(request)

    outer, inner = Count("outer"), Count("inner")
    limit = ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")  # before PaCoRe: counts model steps
    with mock_server(scripted_reply) as server:
        pacore = PaCoReMiddleware(PaCoReConfig(rounds=ROUNDS))
        base = OpenAICompatibleChatModel(base_url=server.base_url, model="m")
        agent = create_agent(base, [get_weather], middleware=[limit, outer, pacore, inner])
        out = agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
    assert out["messages"][-1].content == "The tool answered: sunny in Paris"
    assert (outer.calls, inner.calls, len(server.requests)) == (2, 2 * CALLS, 2 * CALLS)


@pytest.mark.parametrize("entry", ["model", "middleware"])
async def test_two_turns_on_an_async_sqlite_saver(mock_server, tmp_path, entry):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    with mock_server(scripted_reply) as server:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
            agent = agents(OpenAICompatibleChatModel(base_url=server.base_url, model="m"), checkpointer=saver)[entry]
            thread = {"configurable": {"thread_id": "t1"}}
            await agent.ainvoke({"messages": [("user", "What is the weather in Paris?")]}, thread)
            out = await agent.ainvoke({"messages": [("user", "hello")]}, thread)
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai", "human", "ai"]
    assert len(server.requests) == 3 * CALLS


async def test_astream_events_show_every_trajectory_and_the_answer_streams_as_the_models_run(mock_server):
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        events = [event async for event in model.astream_events("hello", version="v2")]
    starts = [e for e in events if e["event"] == "on_chat_model_start"]
    assert len(starts) == 1 + CALLS and sum(e["name"] == "PaCoReChatModel" for e in starts) == 1
    own = [e for e in events if e["event"] == "on_chat_model_stream" and e["name"] == "PaCoReChatModel"]
    assert "".join(str(e["data"]["chunk"].content) for e in own) == "Hello! I am a scripted model, and I am doing well."
    streamed_trajectories = {
        e["metadata"].get("pacore_round")
        for e in events
        if e["event"] == "on_chat_model_stream" and e["name"] != "PaCoReChatModel"
    }
    assert streamed_trajectories <= {len(ROUNDS)}  # only the final synthesis streams, never a proposal


def test_a_tool_choice_naming_no_bound_tool_is_refused_at_bind_time(mock_server):
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"))
        with pytest.raises(ValueError, match="'get_wether', which is not among the bound tools"):
            model.bind_tools([get_weather], tool_choice="get_wether")
    assert server.requests == []


def strict_of(requests) -> set:
    """What the requests said of their tools' ``strict`` (``"absent"`` where a tool said nothing)."""
    return {tool["function"].get("strict", "absent") for body in requests for tool in body["tools"]}


@pytest.mark.parametrize("strict", [None, True, False])
def test_strict_reaches_the_server_from_every_langchain_entry_point(mock_server, strict):
    """``bind_tools(strict=...)`` on the client and on PaCoReChatModel, and ``model_settings={"strict": ...}`` of
    ``create_agent`` on both PaCoRe entry points: True sends strict tools, False sends none, unset stays strict."""
    from langchain.agents.middleware import wrap_model_call

    @wrap_model_call
    def settings(request, handler):
        if strict is None:
            return handler(request)
        return handler(request.override(model_settings={**request.model_settings, "strict": strict}))

    wanted = {False} if strict is False else {True}
    kwargs = {} if strict is None else {"strict": strict}
    with mock_server(scripted_reply) as server:
        base = OpenAICompatibleChatModel(base_url=server.base_url, model="m")
        pacore = PaCoReChatModel(model=base, config=PaCoReConfig(rounds=ROUNDS))
        for model in (base, pacore):
            model.bind_tools([get_weather], tool_choice="get_weather", **kwargs).invoke("Weather in Paris?")
            assert strict_of(server.requests) == wanted, type(model).__name__
            server.requests.clear()
        config = PaCoReConfig(rounds=ROUNDS)
        for agent in (
            create_agent(PaCoReChatModel(model=base, config=config), [get_weather], middleware=[settings]),
            create_agent(base, [get_weather], middleware=[settings, PaCoReMiddleware(config)]),
        ):
            agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
            assert len(server.requests) == 2 * CALLS and strict_of(server.requests) == wanted
            server.requests.clear()
