"""PaCoReChatModel's own run: every trajectory's run lies under it however LangChain enters the model, its id is
the one the caller's config gives, the caller's ambient config is left as it was, and the compiled runners are
kept by the call's arguments (over the scripted server)."""

from __future__ import annotations

import asyncio
import copy
from contextvars import ContextVar
from typing import ClassVar
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langchain_core.tracers.context import register_configure_hook
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config
from scripted_chat import TEXT, scripted_reply

import pacore_graph.integrations.chat_model as chat_model_module
from pacore_graph import PaCoReChatModel, PaCoReConfig
from pacore_graph.integrations.chat_model import runner_key
from pacore_graph.models import OpenAICompatibleChatModel

ROUNDS = [2]
CALLS = sum(ROUNDS) + 1


@tool
def get_weather(location: str) -> str:
    """The weather somewhere."""
    return f"sunny in {location}"


class Runs(BaseCallbackHandler):
    """Every run's parent, and the chat-model runs with their tags and metadata."""

    def __init__(self) -> None:
        self.parents: dict[UUID, UUID | None] = {}
        self.chat: list[tuple[UUID, list[str], dict]] = []

    def on_chat_model_start(
        self, serialized, messages, *, run_id, parent_run_id=None, tags=None, metadata=None, **kwargs
    ) -> None:
        self.parents[run_id] = parent_run_id
        self.chat.append((run_id, tags or [], metadata or {}))

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs) -> None:
        self.parents[run_id] = parent_run_id

    def ancestors(self, run_id: UUID) -> list[UUID]:
        found = []
        while (run_id := self.parents.get(run_id)) is not None:
            found.append(run_id)
        return found

    def own_runs(self) -> list[UUID]:
        return [run_id for run_id, _, metadata in self.chat if "pacore_round" not in metadata]

    def trajectories(self) -> list[tuple[UUID, list[str]]]:
        return [(run_id, tags) for run_id, tags, metadata in self.chat if "pacore_round" in metadata]


def entries(model: PaCoReChatModel):
    """Each way a caller enters the model; LangChain hands the run manager to some of them only."""
    return {
        "invoke": lambda config: model.invoke("hello", config),
        "invoke streaming": lambda config: model.invoke("hello", config, stream=True),
        "stream": lambda config: list(model.stream("hello", config)),
        "ainvoke": lambda config: asyncio.run(model.ainvoke("hello", config)),
        "astream": lambda config: asyncio.run(_collect(model.astream("hello", config))),
        "astream_events": lambda config: asyncio.run(_collect(model.astream_events("hello", config, version="v2"))),
        "stream_events v3": lambda config: list(model.stream_events("hello", config, version="v3")),
        "batch": lambda config: model.batch(["hello"], config),
    }


async def _collect(items):
    return [item async for item in items]


def test_every_trajectory_runs_under_the_models_run_however_it_is_entered(mock_server):
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        for name, enter in entries(model).items():
            runs = Runs()
            enter({"callbacks": [runs], "tags": ["mine"]})
            (own,) = runs.own_runs()
            assert runs.parents[own] is None, name
            trajectories = runs.trajectories()
            assert len(trajectories) == CALLS, name
            assert all(own in runs.ancestors(run_id) and "mine" in tags for run_id, tags in trajectories), name
    assert len(server.requests) == len(entries(model)) * CALLS


class EnvTracerLike(BaseCallbackHandler):
    """Made anew by every callback configuration while its environment variable is set, as LangSmith's tracer
    is: an instance knows only the runs it saw start, and a run whose parent it never saw is cut off."""

    starts: ClassVar[list[UUID]] = []
    orphans: ClassVar[list[UUID]] = []

    def __init__(self) -> None:
        self.known: set[UUID] = set()

    def _start(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        EnvTracerLike.starts.append(run_id)
        if parent_run_id is not None and parent_run_id not in self.known:
            EnvTracerLike.orphans.append(run_id)
        self.known.add(run_id)

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kwargs) -> None:
        self._start(run_id, parent_run_id)

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs) -> None:
        self._start(run_id, parent_run_id)


register_configure_hook(ContextVar("env_tracer_like", default=None), True, EnvTracerLike, "PACORE_TEST_ENV_TRACER")


def test_a_tracer_from_the_environment_sees_the_trajectories_under_the_models_run(mock_server, monkeypatch):
    monkeypatch.setenv("PACORE_TEST_ENV_TRACER", "true")
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        for name, enter in entries(model).items():
            EnvTracerLike.starts.clear()
            enter(None)
            assert len(EnvTracerLike.starts) > CALLS + 1, name  # the model's run, the graph's, the trajectories'
            assert EnvTracerLike.orphans == [], name
    assert len(server.requests) == len(entries(model)) * CALLS


def test_the_callers_run_id_is_the_models_and_its_ambient_config_is_left_as_it_was(mock_server):
    chosen = uuid4()
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        runs = Runs()
        chunks = list(model.stream("hello", {"run_id": chosen, "callbacks": [runs]}))
        assert str(sum(chunks[1:], chunks[0]).content) == TEXT
        assert runs.own_runs() == [chosen]

        async def inside(question: str) -> list[bool]:
            before = get_config()
            kept = [(await model.ainvoke(question)).content == TEXT, get_config() is before]
            chunks = model.astream(question)
            first = await anext(chunks)  # the run has started; the rest is not read yet
            kept.append(get_config() is before)
            rest = [chunk async for chunk in chunks]
            kept += [str(sum(rest, first).content) == TEXT, get_config() is before]
            return kept

        assert asyncio.run(RunnableLambda(inside).ainvoke("hello", {"tags": ["outer"]})) == [True] * 5
    assert len(server.requests) == 3 * CALLS


def test_runners_are_kept_by_the_calls_arguments(mock_server, monkeypatch):
    tools = [convert_to_openai_tool(get_weather)]
    key = runner_key({"tools": tools, "tool_choice": "any"})
    assert key is not None and key == runner_key({"tool_choice": "any", "tools": copy.deepcopy(tools)})
    assert hash(key) == hash(runner_key({"tool_choice": "any", "tools": copy.deepcopy(tools)}))
    assert key != runner_key({"tools": tools})
    assert runner_key({"temperature": 1}) != runner_key({"temperature": True})
    assert runner_key({"metadata": {"tags": {"a", "b"}}}) is None  # a set has no hash: that call is not cached

    built = []

    class CountingRunner(chat_model_module.PaCoReRunner):
        def __init__(self, *args, **kwargs):
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(chat_model_module, "PaCoReRunner", CountingRunner)
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        with_tools = model.bind_tools([get_weather])
        assert with_tools.invoke("What is the weather in Paris?").tool_calls
        assert model.bind_tools([get_weather]).invoke("What is the weather in Paris?").tool_calls
        assert model.invoke("hello").content == TEXT
        assert list(with_tools.stream("What is the weather in Paris?"))
    assert len(built) == 2  # one with the tools, one without
    assert len(server.requests) == 4 * CALLS


def test_a_streaming_generate_runs_under_the_models_run_and_streams_only_the_synthesis(mock_server):
    """``generate`` (LangChain's older entry point) asking for a stream reaches the model with its run manager as
    every other road does: the trajectories lie under the model's run, and only the synthesis streams."""
    with mock_server(scripted_reply) as server:
        model = PaCoReChatModel(
            model=OpenAICompatibleChatModel(base_url=server.base_url, model="m"), config=PaCoReConfig(rounds=ROUNDS)
        )
        runs = Runs()
        result = model.generate([[HumanMessage("hello")]], callbacks=[runs], stream=True)
    assert result.generations[0][0].message.content == TEXT
    assert [body.get("stream", False) for body in server.requests] == [False] * sum(ROUNDS) + [True]
    (own,) = runs.own_runs()
    assert all(own in runs.ancestors(run_id) for run_id, _ in runs.trajectories())


def test_the_model_keeps_langchains_entry_points_and_has_no_astream():
    """No entry point of LangChain's is redone to carry the run's identity; the tokens come through callbacks, so
    there is no ``_astream`` for LangChain to call without a run manager."""
    from langchain_core.language_models import BaseChatModel

    for name in ("invoke", "ainvoke", "batch", "abatch", "generate", "agenerate"):
        assert getattr(PaCoReChatModel, name) is getattr(BaseChatModel, name), name
    assert PaCoReChatModel._astream is BaseChatModel._astream and PaCoReChatModel._stream is BaseChatModel._stream
