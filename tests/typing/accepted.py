"""Code a user writes against the public API: it must type-check under `mypy --strict` with no error.

Checked, never run: `make test` runs mypy over it ([tool.mypy] in pyproject.toml) and tests/project/test_typing.py runs
mypy on it beside `rejected.py`, the mistakes a type checker must catch. Each function is one use.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from pacore_graph import (
    AgentExplorer,
    EpisodeContext,
    PaCoReChatModel,
    PaCoReConfig,
    PaCoReContext,
    PaCoReError,
    PaCoReMiddleware,
    PaCoReNode,
    PaCoReResult,
    Problem,
    RoundFailedError,
    RunFolder,
    asolve,
    build_pacore_graph,
    chat_model,
    solve,
)
from pacore_graph.coordination import Panel, PanelMember
from pacore_graph.extend import ChatExplorer, Explorer, PaCoReRunner, RunSummary, Trajectory
from pacore_graph.server import create_app


def one_problem() -> str:
    model = chat_model()  # the embedded model; chat_model(base_url=...) for vLLM
    result: PaCoReResult = solve(model, "What is 17*23?", PaCoReConfig.preset("low"))
    tokens: int = result.ttc
    print(tokens, [len(r.trajectories) for r in result.rounds], [f.error for f in result.failures])
    return result.answer


async def one_conversation(model: BaseChatModel) -> AIMessage:
    events: list[dict[str, Any]] = []
    result = await asolve(
        model,
        [("system", "Be brief."), ("user", "Name a prime.")],
        PaCoReConfig(rounds=[4, 2], temperature=0.8, final_selector="vote", answer_extractor="boxed"),
        trace=True,
        on_event=events.append,
    )
    for trajectory in result.trajectories or []:
        print(trajectory.content, trajectory.reasoning, trajectory.completion_tokens)
    return result.message


async def openai_style_messages(model: BaseChatModel) -> str:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]
    return (await asolve(model, messages)).answer


def bound_and_wrapped_models(model: BaseChatModel) -> None:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    solve(model.bind_tools([get_weather]), "What is the weather in Paris?")
    solve(model.bind(stop=["\n\n"]).with_retry(stop_after_attempt=2), "q")


def in_a_graph(model: BaseChatModel) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("think", PaCoReNode(model, PaCoReConfig.preset("medium"), trace=True))
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    state = graph.invoke({"messages": [HumanMessage("What is 17*23?")]}, {"configurable": {"thread_id": "1"}})
    print(state["messages"][-1].content)


async def the_bare_graph(model: BaseChatModel) -> None:
    graph = build_pacore_graph(model, PaCoReConfig(rounds=[4])).compile()
    conversation: list[BaseMessage] = [SystemMessage("Be brief."), HumanMessage("What is 2+2?")]
    context = PaCoReContext(messages=conversation, payload={"task": 1}, on_event=print)
    state = await graph.ainvoke({}, context=context)
    print(state["answer"], context.messages, context.payload)
    again = await graph.ainvoke({}, context=context)  # a context may run again, one run at a time
    print(again["rounds"])


class EchoExplorer:
    """An explorer of one's own: any class with this `explore` is one (a Protocol, no base class)."""

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        episode.record({"round": episode.round_index, "index": episode.index})
        return Trajectory(content=f"answer {episode.index}", completion_tokens=1)


def explorers(model: BaseChatModel) -> None:
    own: Explorer = EchoExplorer()
    records: list[Any] = []
    solve(own, "q", PaCoReConfig(rounds=[2]), payload={"row": 1}, on_record=records.append)
    solve(ChatExplorer(model, PaCoReConfig()), "q")

    def episode(state: dict[str, Any]) -> dict[str, list[BaseMessage]]:
        return {"messages": [*state["messages"], AIMessage("done")]}

    agent = RunnableLambda(episode)
    solve(AgentExplorer(agent, output=lambda state: state["messages"][-1]), "fix the bug")


async def many_problems(model: BaseChatModel) -> RunSummary:
    problems = [Problem("q1", "What is 17*23?"), Problem("q2", [("user", "Name a prime.")], payload=2)]
    async with RunFolder("runs/demo", fingerprint={"model": "m", "rounds": [4]}, progress=False) as folder:
        summary = await folder.run(model, PaCoReConfig(rounds=[4]), problems, concurrency=2)
        print(len(folder.results.rows), summary.failed)
    return summary


async def a_runner(model: BaseChatModel) -> list[PaCoReResult]:
    runner = PaCoReRunner(model, PaCoReConfig(rounds=[4], max_concurrency=8))
    return list(await asyncio.gather(*(runner.arun(f"problem {n}") for n in range(3))))


def langchain_slots(model: BaseChatModel) -> None:
    wrapped = PaCoReChatModel(model=model, config=PaCoReConfig(rounds=[4]), temperature=0.7)
    print(wrapped.invoke("What is 17*23?").content)
    print(PaCoReMiddleware(PaCoReConfig(rounds=[4])).config.rounds)
    print(create_app(chat_model("http://127.0.0.1:8000/v1")).routes)


async def a_panel(small: BaseChatModel, strong: BaseChatModel) -> dict[str, dict[str, Any]]:
    panel = Panel(
        models={"small": PanelMember(weight=3), "strong": PanelMember(context_window=32768)}, synthesizer="strong"
    )
    config = PaCoReConfig(rounds=[16], panel=panel)
    models = {"small": small, "strong": strong}
    PaCoReNode(models, config)
    PaCoReChatModel(models=models, config=config)
    PaCoReMiddleware(config, models={"small": small})
    result = await asolve(models, "What is 17*23?", config)
    print([t.model for r in result.rounds for t in r.trajectories])
    return result.models


def errors(model: BaseChatModel) -> None:
    try:
        solve(model, "q")
    except RoundFailedError as failed:
        print(failed.round.round_index, [t.error_status for t in failed.round.trajectories])
    except PaCoReError as other:
        print(other)
