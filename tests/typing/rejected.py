"""Mistakes a user makes against the public API that a type checker must catch before anything runs.

Checked, never run, and not part of `make test`'s own mypy run: tests/project/test_typing.py runs mypy on this file and
expects, on each line that ends with ``# expect: CODE``, an error of that code, and no error on any other line.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage

from pacore_graph import (
    AgentExplorer,
    EpisodeContext,
    PaCoReChatModel,
    PaCoReConfig,
    PaCoReContext,
    PaCoReNode,
    Problem,
    RunFolder,
    asolve,
    build_pacore_graph,
    solve,
)
from pacore_graph.extend import PaCoReRunner, Trajectory


def a_model_name_instead_of_a_model() -> None:
    solve("gpt-4o", "What is 17*23?")  # expect: arg-type
    PaCoReNode("stepfun-ai/PaCoRe-8B")  # expect: arg-type
    PaCoReRunner(None)  # expect: arg-type
    # a mapping is a panel's models by name: its values must be models, not names
    build_pacore_graph({"model": "gpt-4o"})  # expect: dict-item
    PaCoReChatModel(model="gpt-4o")  # expect: arg-type


def misspelled_or_mistyped_settings() -> None:
    PaCoReConfig(round=[4])  # expect: call-arg
    PaCoReConfig(rounds="4,2")  # expect: arg-type
    PaCoReConfig(final_selector="votes")  # expect: arg-type
    PaCoReConfig(temperature=None)  # expect: arg-type


def the_config_where_the_messages_go(model: BaseChatModel) -> None:
    solve(model, PaCoReConfig(rounds=[4]))  # expect: arg-type


def show(line: str) -> None:
    print(line)


async def unknown_or_mistyped_run_options(model: BaseChatModel) -> None:
    solve(model, "q", tracing=True)  # expect: call-arg
    await asolve(model, "q", trace="yes")  # expect: arg-type
    await asolve(model, "q", on_event=show)  # expect: arg-type
    await PaCoReRunner(model).arun("q", on_events=print)  # expect: call-arg


def a_context_is_read_only(messages: list[BaseMessage]) -> None:
    context = PaCoReContext(messages=messages)
    context.messages = [HumanMessage("another question")]  # expect: misc
    context.payload = {"task": 2}  # expect: misc
    PaCoReContext(messages="What is 17*23?")  # expect: arg-type


def results_have_the_fields_they_document(model: BaseChatModel) -> None:
    result = solve(model, "q")
    print(result.answr)  # expect: attr-defined
    tokens: str = result.ttc  # expect: assignment
    print(tokens)


class NotAnExplorer:
    """`explore` takes the messages and the episode and returns a Trajectory: this one does not."""

    def explore(self, messages: list[BaseMessage]) -> str:
        return "answer"


async def explorers_keep_the_protocol(episode: EpisodeContext) -> Trajectory:
    solve(NotAnExplorer(), "q")  # expect: arg-type
    AgentExplorer(print, output=str)  # expect: arg-type
    episode.index = 2  # expect: misc
    return Trajectory(content=1)  # expect: arg-type


async def run_folders(model: BaseChatModel, config: PaCoReConfig, problems: list[Problem]) -> None:
    async with RunFolder("runs/demo", fingerprint={"model": "m"}) as folder:
        await folder.run("gpt-4o", config, problems)  # expect: arg-type
        await folder.run(model, config, ["What is 17*23?"])  # expect: list-item
        await folder.run(model, {"rounds": [4]}, problems)  # expect: arg-type
    Problem("q1")  # expect: call-arg
