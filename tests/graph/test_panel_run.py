"""A panel run over scripted servers (one per model): which requests went where, what each record says, each model's
own window and retries, the account per model, the same slot map on a resume, and every entry point taking it."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from mock_openai import MockOpenAIServer
from waits import await_until

from pacore_graph import (
    PaCoReChatModel,
    PaCoReConfig,
    PaCoReMiddleware,
    PaCoReNode,
    Problem,
    RunFolder,
    asolve,
    solve,
)
from pacore_graph.models import OpenAICompatibleChatModel

PROBLEM = "What is 6 * 7?"


def replies(name: str, failing: int = 0):
    """A server that says who it is; ``failing``: the first that many attempts of each prompt get a 503."""

    def reply(body, attempt):
        if attempt <= failing:
            return 503
        return {"content": f"{name} thinks \\boxed{{42}}", "usage": {"prompt_tokens": 10, "completion_tokens": 7}}

    return reply


def servers(*specs):
    return [MockOpenAIServer(replies(name, failing), model=f"{name}-model") for name, failing in specs]


def client(server: MockOpenAIServer) -> OpenAICompatibleChatModel:
    return OpenAICompatibleChatModel(base_url=server.base_url, model=server.model)


PANEL = {"models": {"small": 3, "strong": 1}, "synthesizer": "strong"}


def who(body) -> str:
    return body["model"].removesuffix("-model")


def test_each_slot_goes_to_its_model_and_its_record_names_it():
    config = PaCoReConfig(rounds=[8, 4], panel=PANEL)
    small, strong = servers(("small", 0), ("strong", 0))
    with small, strong:
        result = solve({"small": client(small), "strong": client(strong)}, PROBLEM, config)
    assert len(small.requests) + len(strong.requests) == 8 + 4 + 1
    planned = [config.panel.slot_map(i, k, i == 2, config.seed) for i, k in enumerate([8, 4, 1])]
    assert Counter(name for slots in planned for name in slots) == {"small": len(small.requests), "strong": 4}
    for round_, slots in zip(result.rounds, planned, strict=True):
        assert [t.model for t in round_.trajectories] == slots
        assert all(t.conclusion.startswith(t.model) for t in round_.trajectories)  # its model's server answered
    assert result.answer.startswith("strong")
    models = result.models
    assert models["small"]["trajectories"] == len(small.requests) and models["strong"]["requests"] == 4
    assert models["small"]["completion_tokens"] == 7 * len(small.requests)
    account = result.message.response_metadata["pacore"]["models"]
    assert account == models and result.summary()["models"] == models
    assert "small: 9 trajectories" in str(result)


def test_retries_and_the_context_window_are_each_models_own():
    """Both servers answer a prompt's first request with a 503. small may try once: its trajectories fail; strong
    retries (the run's policy): its trajectories succeed. strong's window is small: its synthesis prompt is fitted
    into it, small's (no window) is not cut."""
    long_problem = "Consider carefully. " * 200 + PROBLEM
    panel = {
        "models": {"small": {"weight": 1, "max_attempts": 1}, "strong": {"weight": 1, "context_window": 600}},
        "synthesizer": "strong",
        "rounds": [["small", "strong", "strong", "strong"], ["small", "strong"]],
    }
    config = PaCoReConfig(rounds=[4, 2], panel=panel, max_tokens=100)
    config = config.model_copy(update={"retry": config.retry.model_copy(update={"initial_delay": 0, "jitter": 0})})
    small, strong = servers(("small", 1), ("strong", 1))
    with small, strong:
        result = solve({"small": client(small), "strong": client(strong)}, long_problem, config)
        first = {t.index: t for t in result.rounds[0].trajectories}
        assert first[0].model == "small" and first[0].attempts == 1 and first[0].failed
        assert not any(first[i].failed for i in (1, 2, 3))  # strong retried its 503
        assert sum(first[i].attempts for i in (1, 2, 3)) == 4  # the prompt's first request failed, once
        synthesis_small = [b for b in small.requests if "Reference Responses" in json.dumps(b)]
        synthesis_strong = [b for b in strong.requests if "Reference Responses" in json.dumps(b)]
    assert synthesis_small and synthesis_strong
    assert "to fit the context" in json.dumps(synthesis_strong[-1]["messages"])  # fitted into its 600 tokens
    assert "to fit the context" not in json.dumps(synthesis_small[-1]["messages"])


def test_a_model_failing_shows_in_its_account_only():
    config = PaCoReConfig(
        rounds=[4], panel={**PANEL, "models": {"small": {"weight": 1, "max_attempts": 1}, "strong": 1}}
    )
    small = MockOpenAIServer(lambda body, attempt: 400, model="small-model")
    (strong,) = servers(("strong", 0))
    with small, strong:
        result = solve({"small": client(small), "strong": client(strong)}, PROBLEM, config)
    models = result.models
    assert models["small"]["failed"] == models["small"]["trajectories"] == 2
    assert models["strong"]["failed"] == 0 and models["strong"]["trajectories"] == 3
    assert all(t.model == "small" for t in result.failures)


def test_the_models_must_match_the_panel():
    small, strong = servers(("small", 0), ("strong", 0))
    with small, strong:
        models = {"small": client(small), "strong": client(strong)}
        with pytest.raises(ValueError, match="need a panel"):
            solve(models, PROBLEM, PaCoReConfig())
        with pytest.raises(ValueError, match="mapping"):
            solve(client(small), PROBLEM, PaCoReConfig(panel=PANEL))
        with pytest.raises(ValueError, match="missing strong"):
            solve({"small": models["small"]}, PROBLEM, PaCoReConfig(panel=PANEL))
        assert not small.requests and not strong.requests


def test_a_node_and_a_chat_model_take_a_panel():
    config = PaCoReConfig(rounds=[3], panel=PANEL)
    small, strong = servers(("small", 0), ("strong", 0))
    with small, strong:
        models = {"small": client(small), "strong": client(strong)}
        builder = StateGraph(MessagesState)
        builder.add_node("think", PaCoReNode(models, config))
        builder.add_edge(START, "think")
        builder.add_edge("think", END)
        out = builder.compile().invoke({"messages": [("user", PROBLEM)]})
        assert out["messages"][-1].content.startswith("strong")
        assert set(out["messages"][-1].response_metadata["pacore"]["models"]) == {"small", "strong"}
        chat = PaCoReChatModel(models=models, config=config)
        assert chat.model_name == "strong-model"  # the synthesiser stands for the panel
        reply = chat.invoke(PROBLEM)
        assert reply.content.startswith("strong") and reply.response_metadata["pacore"]["models"]
        assert len(small.requests) + len(strong.requests) == 2 * (3 + 1)


def test_middleware_sends_each_slot_to_its_model_the_agents_model_standing_for_one_name():
    config = PaCoReConfig(rounds=[4], panel=PANEL)
    small, strong = servers(("small", 0), ("strong", 0))
    with small, strong:
        agent = create_agent(client(strong), middleware=[PaCoReMiddleware(config, models={"small": client(small)})])
        out = agent.invoke({"messages": [("user", PROBLEM)]})
        assert out["messages"][-1].content.startswith("strong")
        planned = Counter(config.panel.slot_map(0, 4, False, config.seed))
        assert len(small.requests) == planned["small"] and len(strong.requests) == planned["strong"] + 1
    with pytest.raises(ValueError, match="have no model"):
        PaCoReMiddleware(PaCoReConfig(panel={"models": {"a": 1, "b": 1, "c": 1}, "synthesizer": "a"}))


def test_a_run_folder_resumes_with_the_same_slot_map(tmp_path):
    """A run killed in round 2 resumes with the slots it had: round 1 is not sent again, round 2's unfinished
    trajectories go to the models the slot map gave them."""
    config = PaCoReConfig(rounds=[4, 4], panel={"models": {"small": 1, "strong": 1}, "synthesizer": "strong"})
    gate = {"open": False}

    def stuck_in_round_two(name):
        def reply(body, attempt):
            if "Reference Responses" in json.dumps(body) and not gate["open"]:
                return {"content": "", "delay": 30}
            return {"content": f"{name} thinks \\boxed{{42}}"}

        return reply

    small = MockOpenAIServer(stuck_in_round_two("small"), model="small-model")
    strong = MockOpenAIServer(stuck_in_round_two("strong"), model="strong-model")
    with small, strong:
        models = {"small": client(small), "strong": client(strong)}

        async def first_try():
            async with folder_of(tmp_path, config) as folder:
                task = asyncio.ensure_future(folder.run(models, config, [Problem("p", PROBLEM)], label=None))
                await await_until(lambda: syntheses(small, strong) == 4, what="round 2 sent")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(first_try())
        first_round = len(small.requests) + len(strong.requests) - 4
        assert first_round == 4
        gate["open"] = True
        small.requests.clear(), strong.requests.clear()

        async def second_try():
            async with folder_of(tmp_path, config) as folder:
                await folder.run(models, config, [Problem("p", PROBLEM)], label=None)
                return folder.results.rows[0]

        row = asyncio.run(second_try())
    assert not any("Reference Responses" not in json.dumps(b) for b in small.requests + strong.requests)
    slots = config.panel.slot_map(1, 4, False, config.seed)
    assert [t["model"] for t in row["rounds"][1]["trajectories"]] == slots
    assert len(small.requests) == slots.count("small") and len(strong.requests) == slots.count("strong") + 1
    assert set(row["models"]) == {"small", "strong"}


def folder_of(tmp_path, config):
    return RunFolder(tmp_path / "run", fingerprint=config.model_dump(mode="json"), progress=False)


def syntheses(*servers):
    return sum("Reference Responses" in json.dumps(body) for server in servers for body in server.requests)


def test_asolve_with_a_checkpointer_keeps_the_model_of_each_record():
    config = PaCoReConfig(rounds=[2], panel=PANEL)
    small, strong = servers(("small", 0), ("strong", 0))
    with small, strong:
        models = {"small": client(small), "strong": client(strong)}
        result = asyncio.run(
            asolve(
                models,
                PROBLEM,
                config,
                checkpointer=InMemorySaver(),
                runnable_config={"configurable": {"thread_id": "t"}},
            )
        )
    assert [t.model for r in result.rounds for t in r.trajectories] == [
        *config.panel.slot_map(0, 2, False, config.seed),
        "strong",
    ]


def test_a_models_own_bound_on_requests_in_flight_holds_on_its_server_only():
    """small may have one request in flight (a hosted API's rate limit, say); strong is bound by the run only."""
    from pacore_emulator import Emulator, EmulatorConfig

    panel = {"models": {"small": {"weight": 1, "max_concurrency": 1}, "strong": 1}, "synthesizer": "strong"}
    config = PaCoReConfig(rounds=[8], panel=panel)
    slow = {"ttft": 0.1, "token_delay": 0.001, "output_tokens": 20}
    with (
        Emulator(EmulatorConfig(model="small-model", **slow)) as small,
        Emulator(EmulatorConfig(model="strong-model", **slow)) as strong,
    ):
        models = {
            name: OpenAICompatibleChatModel(base_url=e.base_url, model=e.config.model)
            for name, e in (("small", small), ("strong", strong))
        }
        result = solve(models, PROBLEM, config)
        small_stats, strong_stats = small.stats(), strong.stats()
    assert small_stats["requests"] == 4 and strong_stats["requests"] == 5 and not result.failures
    assert small_stats["peak_active"] == 1 and strong_stats["peak_active"] == 4


def test_pacore_tool_takes_a_panel():
    from pacore_graph import pacore_tool

    config = PaCoReConfig(rounds=[4], panel=PANEL)
    small, strong = servers(("small", 0), ("strong", 0))
    with small, strong:
        tool = pacore_tool({"small": client(small), "strong": client(strong)}, config)
        call = {"type": "tool_call", "name": tool.name, "args": {"question": PROBLEM}, "id": "call-1"}
        message = tool.invoke(call)
    assert message.content.startswith("strong") and set(message.artifact["models"]) == {"small", "strong"}
    assert len(small.requests) == 3 and len(strong.requests) == 2
