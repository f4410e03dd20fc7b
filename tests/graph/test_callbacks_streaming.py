"""Every trajectory is a chat-model run that callbacks see; only the final round streams tokens.

Real LangGraph streaming (``stream_mode="messages"``, ``astream_events``) over a scripted server.
"""

from __future__ import annotations

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

from pacore_graph import PaCoReConfig, PaCoReNode, chat_model


def numbered(body, attempt):
    synthesis = "Reference Responses" in str(body["messages"][-1]["content"])
    text = "The final answer is forty-two." if synthesis else f"candidate {attempt}"
    return {
        "content": text,
        "reasoning_content": "private reasoning",
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


class Recorder(BaseCallbackHandler):
    def __init__(self):
        self.starts: list[dict] = []
        self.ends: list[AIMessage] = []
        self.tokens = 0

    def on_chat_model_start(self, serialized, messages, *, metadata=None, tags=None, **kwargs):
        self.starts.append({"metadata": metadata or {}, "tags": tags or []})

    def on_llm_new_token(self, token, **kwargs):
        self.tokens += 1

    def on_llm_end(self, response, **kwargs):
        self.ends.append(response.generations[0][0].message)


def chat_graph(model, rounds=(3,)):
    builder = StateGraph(MessagesState)
    builder.add_node("think", PaCoReNode(model, PaCoReConfig(rounds=list(rounds))))
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    return builder.compile()


def test_callbacks_see_every_trajectory_with_usage_round_index_and_the_callers_tags(mock_server):
    for make in (lambda url: chat_model(url), lambda url: ChatOpenAI(base_url=url, api_key="none", model="mock-model")):
        recorder = Recorder()
        with mock_server(numbered) as server:
            graph = chat_graph(make(server.base_url))
            config = {"callbacks": [recorder], "tags": ["my-tag"], "metadata": {"user": "u1"}}
            graph.invoke({"messages": [("user", "q")]}, config)
        assert len(recorder.starts) == len(recorder.ends) == len(server.requests) == 4
        rounds = sorted((s["metadata"]["pacore_round"], s["metadata"]["pacore_index"]) for s in recorder.starts)
        assert rounds == [(0, 0), (0, 1), (0, 2), (1, 0)]
        assert all("my-tag" in s["tags"] and s["metadata"]["user"] == "u1" for s in recorder.starts)
        assert all(s["metadata"]["langgraph_node"] == "think" for s in recorder.starts)
        assert all(m.usage_metadata["output_tokens"] == 3 for m in recorder.ends)
        earlier = [s for s in recorder.starts if s["metadata"]["pacore_round"] == 0]
        assert all("nostream" in s["tags"] for s in earlier)


def test_messages_stream_yields_the_final_rounds_tokens_only(mock_server):
    with mock_server(numbered) as server:
        graph = chat_graph(chat_model(server.base_url), rounds=(3, 2))
        streamed = list(graph.stream({"messages": [("user", "q")]}, stream_mode="messages"))
    chunks = [(message, meta) for message, meta in streamed if isinstance(message, AIMessageChunk)]
    assert len(streamed) == len(chunks), "the answer is not repeated as a whole message after its tokens"
    text = "".join(str(message.content) for message, _ in chunks)
    assert text == "The final answer is forty-two."
    assert len([m for m, _ in chunks if m.content]) > 5  # token by token, as the server sent them
    assert {(meta["pacore_round"], meta["pacore_index"], meta["langgraph_node"]) for _, meta in chunks} == {
        (2, 0, "think")
    }
    streamed_requests = [body for body in server.requests if body.get("stream")]
    assert len(server.requests) == 6 and len(streamed_requests) == 1  # earlier rounds were not streamed


async def test_astream_events_show_every_run_and_stream_the_final_one(mock_server):
    with mock_server(numbered) as server:
        graph = chat_graph(chat_model(server.base_url))
        events = [e async for e in graph.astream_events({"messages": [("user", "q")]}, version="v2")]
    starts = [e for e in events if e["event"] == "on_chat_model_start"]
    ends = [e for e in events if e["event"] == "on_chat_model_end"]
    tokens = [e for e in events if e["event"] == "on_chat_model_stream"]
    assert len(starts) == len(ends) == 4
    assert tokens and {e["metadata"]["pacore_round"] for e in tokens} == {1}
    assert "".join(str(e["data"]["chunk"].content) for e in tokens) == "The final answer is forty-two."
    answer = [e for e in events if e["event"] == "on_chain_end" and e["name"] == "LangGraph"][-1]
    assert answer["data"]["output"]["messages"][-1].content == "The final answer is forty-two."


def test_every_trajectory_is_one_model_call_and_handlers_attached_anywhere_see_it(mock_server, monkeypatch):
    """Each trajectory is one ``ainvoke`` of the model, observed or not; with no handler anywhere, every
    whole message takes the client's short road (no ``BaseChatModel.agenerate``). A handler attached any way a
    caller attaches one (config, the compiled graph's ``with_config``, the model's own ``callbacks``, the
    ambient ``collect_runs()``) sees every trajectory as a chat-model run with the caller's tags."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.tracers.context import collect_runs

    from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel

    calls: list[str] = []
    real_ainvoke, real_agenerate = OpenAICompatibleChatModel.ainvoke, BaseChatModel.agenerate

    async def counting_ainvoke(self, *args, **kwargs):
        calls.append("ainvoke")
        return await real_ainvoke(self, *args, **kwargs)

    async def counting_agenerate(self, *args, **kwargs):
        calls.append("agenerate")
        return await real_agenerate(self, *args, **kwargs)

    monkeypatch.setattr(OpenAICompatibleChatModel, "ainvoke", counting_ainvoke)
    monkeypatch.setattr(BaseChatModel, "agenerate", counting_agenerate)
    with mock_server(numbered) as server:
        quiet = chat_graph(chat_model(server.base_url))
        assert quiet.invoke({"messages": [("user", "q")]})["messages"][-1].content == "The final answer is forty-two."
        assert len(server.requests) == 4 and calls == ["ainvoke"] * 4

        for attach in ("config", "with_config", "model", "collect_runs"):
            recorder = Recorder()
            own = [recorder] if attach == "model" else None
            graph = chat_graph(chat_model(server.base_url, callbacks=own))
            config = {"tags": ["my-tag"]}
            if attach == "config":
                config["callbacks"] = [recorder]
            elif attach == "with_config":
                graph = graph.with_config(callbacks=[recorder])
            if attach == "collect_runs":
                with collect_runs() as collector:
                    graph.invoke({"messages": [("user", "q")]}, config)
                chat_runs = [run for run in collector.traced_runs if run.run_type == "llm"]
                assert len(chat_runs) == 4, attach
                assert all("my-tag" in run.tags for run in chat_runs)
                continue
            graph.invoke({"messages": [("user", "q")]}, config)
            assert len(recorder.starts) == len(recorder.ends) == 4, attach
            assert all("my-tag" in start["tags"] for start in recorder.starts), attach
            assert sorted(s["metadata"]["pacore_round"] for s in recorder.starts) == [0, 0, 0, 1], attach


class ChainRecorder(BaseCallbackHandler):
    def __init__(self):
        self.chains: list[tuple[str, dict]] = []
        self.chat_starts = 0

    def on_chain_start(self, serialized, inputs, *, metadata=None, name=None, **kwargs):
        self.chains.append((name or "", metadata or {}))

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.chat_starts += 1


def test_an_observed_run_keeps_the_enclosing_nodes_metadata_on_the_pacore_graphs_run(mock_server):
    """With a handler attached nothing is left out: the PaCoRe graph's run shows the enclosing node's
    metadata, as any subgraph's does (a run nobody observes leaves it out, see pacore_graph.graph.unseen)."""
    recorder = ChainRecorder()
    with mock_server(numbered) as server:
        chat_graph(chat_model(server.base_url)).invoke({"messages": [("user", "q")]}, {"callbacks": [recorder]})
    inner = [metadata for name, metadata in recorder.chains if name == "pacore"]
    assert inner and all(metadata["langgraph_node"] == "think" for metadata in inner)
    trajectories = [metadata for name, metadata in recorder.chains if name == "trajectory"]
    assert len(trajectories) == 4 and all(metadata["langgraph_node"] == "trajectory" for metadata in trajectories)
    assert recorder.chat_starts == 4


async def test_a_handler_on_the_enclosing_runnable_sees_the_trajectories_of_a_run_given_no_config(mock_server):
    """``asolve`` called inside a traced runnable without passing its config on: LangGraph takes the
    ambient config's handlers for the PaCoRe graph, and they see every model call."""
    from langchain_core.runnables import RunnableLambda

    from pacore_graph import asolve

    recorder = ChainRecorder()
    with mock_server(numbered) as server:
        model = chat_model(server.base_url)

        async def answer(question: str) -> str:
            return (await asolve(model, question, PaCoReConfig(rounds=[3]))).answer

        assert await RunnableLambda(answer).ainvoke("q", {"callbacks": [recorder]}) == "The final answer is forty-two."
    assert recorder.chat_starts == 4 == len(server.requests)


async def test_a_run_nobody_observes_still_hands_explorers_the_callers_metadata():
    """What an unobserved run leaves out is only what no one reads: an explorer still finds the caller's
    own metadata and its task's, and the enclosing graph's config is as it was after the run."""
    from langchain_core.runnables.config import var_child_runnable_config
    from langgraph.config import get_config

    from pacore_graph.records import Trajectory

    seen: list[dict] = []
    after: list[bool] = []  # whether the enclosing node's ambient config is the same object after the run

    class Recording:
        async def explore(self, messages, episode):
            seen.append(dict(get_config()["metadata"]))
            return Trajectory(content=f"candidate {episode.index}")

    node = PaCoReNode(Recording(), PaCoReConfig(rounds=[2]))

    async def think(state, config):
        before = var_child_runnable_config.get()
        update = await node.ainvoke(state, config)
        after.append(var_child_runnable_config.get() is before)
        return update

    builder = StateGraph(MessagesState)
    builder.add_node("think", think)
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    await builder.compile().ainvoke({"messages": [("user", "q")]}, {"metadata": {"user": "u1"}})
    assert len(seen) == 3 and after == [True]
    assert all(metadata["user"] == "u1" and metadata["langgraph_node"] == "trajectory" for metadata in seen)
