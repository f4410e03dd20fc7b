"""The operator with deterministic fake models: config, compaction, message surgery, graph, node."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Annotated

import pytest
from fakes import PromptFunctionChatModel, digest, think_reply
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph, add_messages
from pydantic import BaseModel, ValidationError

from pacore_graph import (
    AgentExplorer,
    PaCoReConfig,
    PaCoReContext,
    PaCoReNode,
    RoundFailedError,
    asolve,
    build_pacore_graph,
    solve,
)
from pacore_graph.config import parse_rounds
from pacore_graph.extend import RetryPolicy, RoundRecord, Trajectory
from pacore_graph.synthesis.compaction import compact
from pacore_graph.synthesis.context_window import cap_text, fit_references
from pacore_graph.synthesis.prompt import message_text, order_references, synthesis_messages
from pacore_graph.synthesis.tokens import count_tokens

# ---- config ---------------------------------------------------------------------------------------


def test_presets_match_the_paper():
    assert PaCoReConfig.preset("low").schedule == [4, 1]
    assert PaCoReConfig.preset("medium").schedule == [16, 1]
    assert PaCoReConfig.preset("high").schedule == [32, 4, 1]
    default = PaCoReConfig()
    assert (default.temperature, default.top_p, default.max_tokens, default.seed) == (1.0, 1.0, None, 42)
    assert default.request_timeout >= 3600  # hour-long generations are normal


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"rounds": [4, 0]}, "rounds"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"template": "no references here"}, "template"),
        ({"template": "{% for %}"}, "template"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_invalid_config_fails_at_construction_naming_the_field(fields, named):
    with pytest.raises(ValidationError) as caught:
        PaCoReConfig(**fields)
    assert named in {".".join(map(str, error["loc"])) for error in caught.value.errors()}


def test_unknown_preset_and_bad_rounds_text():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        PaCoReConfig.preset("huge")
    assert parse_rounds("32,4") == [32, 4] and parse_rounds("0") == []
    with pytest.raises(ValueError, match="comma-separated"):
        parse_rounds("32;4")


# ---- compaction -----------------------------------------------------------------------------------


def test_compaction_of_reasoning_field_and_think_tags():
    assert compact("conclusion", reasoning="thinking").conclusion == "conclusion"
    tagged = compact("<think>a</think>b</think>final", finish_reason="stop")
    assert tagged.conclusion == "final" and "a" in tagged.reasoning and not tagged.truncated
    unclosed = compact("<think>never ends", finish_reason="length")
    assert unclosed.conclusion == "" and unclosed.truncated and unclosed.reasoning == "never ends"
    plain = compact("no tags at all")
    assert plain.conclusion == "no tags at all" and plain.reasoning == ""


# ---- message surgery ------------------------------------------------------------------------------


def test_only_the_last_user_message_is_replaced():
    messages = [
        SystemMessage("sys"),
        HumanMessage("first"),
        AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
        ToolMessage("tool out", tool_call_id="1"),
        HumanMessage("second"),
        AIMessage("trailing assistant turn"),
    ]
    out = synthesis_messages(messages, ["r1", "r2"])
    assert out[:4] == messages[:4] and out[5] == messages[5]
    assert out[4].content.startswith("You are given a problem") and "Original Problem:\nsecond" in out[4].content
    assert messages[4].content == "second"  # the caller's list is not mutated


def test_no_user_message_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one user"):
        synthesis_messages([SystemMessage("only system")], ["r"])


def test_reference_order_is_sort_by_length_then_seeded_shuffle():
    import random

    lengths = [5, 1, 9, 3]
    expected = sorted(range(4), key=lambda i: lengths[i])
    random.Random(42).shuffle(expected)
    assert order_references(lengths, 42, "length_shuffle") == expected
    assert order_references(lengths, 42, "index") == [0, 1, 2, 3]


def test_reference_caps_keep_head_and_tail():
    long_text = "HEAD " + "word " * 4000 + " TAIL"
    capped = cap_text(long_text, 100)
    assert capped.startswith("HEAD") and capped.endswith("TAIL") and "tokens cut" in capped
    assert len(capped) < len(long_text) / 5
    config = PaCoReConfig(context_window=2048, max_tokens=512)
    fitted = fit_references([long_text] * 8, [HumanMessage("q")], config)
    total_chars = sum(len(ref) for ref in fitted)
    assert 1 <= len(fitted) <= 8 and total_chars < (2048 - 512) * 4


def test_the_verifier_prompt_is_fitted_to_the_context_with_its_own_template():
    """The verifier round renders ``verifier_template``: its references are capped to fit that prompt, which is
    much longer here than the synthesis template (whose measure would let the references through whole)."""
    rules = "Check every step of every candidate with care. " * 150  # about 1500 tokens of instructions
    candidates = "{% for r in ref_responses %}Candidate {{ loop.index }}:\n{{ r }}\n{% endfor %}"
    verifier_template = f"{rules}\n{{{{ original_prompt }}}}\n{candidates}"

    def reply(messages):
        if message_text(messages[-1]).startswith(rules):
            return "\\boxed{1}"
        return f"candidate {digest(message_text(messages[-1]))} " + "step " * 900 + "\\boxed{4}"

    model = PromptFunctionChatModel(reply=reply, seen=[])
    config = PaCoReConfig(
        rounds=[3], final_selector="verifier", verifier_template=verifier_template, context_window=4096, max_tokens=512
    )
    result = solve(model, "What is 2+2?", config)
    assert result.outcome.selector == "verifier"
    verifier_prompt = message_text(model.seen[-1][-1])
    assert verifier_prompt.startswith(rules)
    assert count_tokens(verifier_prompt)[0] <= 4096 - 512, "the verifier prompt overflows the context window"


# ---- graph ----------------------------------------------------------------------------------------


async def test_graph_runs_the_schedule_and_keeps_only_compacted_state():
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    graph = build_pacore_graph(model, PaCoReConfig(rounds=[3, 2])).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    state = await graph.ainvoke({}, config, context=PaCoReContext(messages=[HumanMessage("What is 2+2?")]))
    assert [r["k"] for r in state["rounds"]] == [3, 2, 1]
    assert len(state["trajectories"]) == 3 + 2 + 1  # every record once, never a copy per round
    assert [(r["start"], r["end"]) for r in state["rounds"]] == [(0, 3), (3, 5), (5, 6)]
    assert len(model.seen) == 6
    checkpoint = (await graph.aget_state(config)).values
    assert "reasoning about" not in repr(checkpoint)  # reasoning never enters graph state
    assert state["answer"].content.startswith("answer-")


async def test_progress_events_stream_in_custom_mode():
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    graph = build_pacore_graph(model, PaCoReConfig(rounds=[2])).compile()
    run = PaCoReContext(messages=[HumanMessage("q")])
    events = [e async for e in graph.astream({}, stream_mode="custom", context=run)]
    kinds = [e["event"] for e in events]
    assert kinds.count("round_started") == 2 and kinds.count("round_finished") == 2
    assert kinds.count("trajectory_finished") == 3
    assert all(e["completion_tokens"] == 7 for e in events if e["event"] == "trajectory_finished")


async def test_a_context_is_the_callers_frozen_input_and_may_run_again():
    """The caller's PaCoReContext is read, never written: assigning a field raises, its conversation is left as
    it was, the run's state is not one of its fields (equality and repr ignore it), and the same context runs a
    second time from the start."""
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    graph = build_pacore_graph(model, PaCoReConfig(rounds=[2])).compile()
    conversation = [HumanMessage("q")]
    context = PaCoReContext(messages=conversation)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.messages = [HumanMessage("another question")]
    first = await graph.ainvoke({}, context=context)
    second = await graph.ainvoke({}, context=context)
    assert first["answer"].content == second["answer"].content and len(model.seen) == 6
    assert [r["k"] for r in second["rounds"]] == [2, 1]
    assert context.messages is conversation and conversation == [HumanMessage("q")]
    assert context == PaCoReContext(messages=[HumanMessage("q")]) and "RunState" not in repr(context)


async def test_time_queued_for_a_slot_does_not_count_against_the_request_timeout():
    """One slot, six trajectories of 0.1 s each and a 0.4 s timeout: the last waits 0.5 s for its slot, and each
    runs in a quarter of its timeout (room for a loaded machine)."""

    class Slow:
        async def explore(self, messages, episode) -> Trajectory:
            index = episode.index
            await asyncio.sleep(0.1)  # the scenario: time passes while a trajectory holds the slot
            return Trajectory(content=f"conclusion {index}", completion_tokens=1)

    config = PaCoReConfig(rounds=[6], max_concurrency=1, request_timeout=0.4, retry=RetryPolicy(max_attempts=1))
    result = await asolve(Slow(), "q", config)
    assert not result.failures and [r.k for r in result.rounds] == [6, 1]


async def test_rounds_zero_is_a_single_plain_call():
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    result = await asolve(model, "plain", PaCoReConfig(rounds=[]))
    assert len(model.seen) == 1 and result.answer == f"answer-{digest('plain')}"


async def test_empty_conclusions_never_reach_the_template():
    model = PromptFunctionChatModel(reply=lambda m: AIMessage(content="<think>only thinking</think>"), seen=[])
    with pytest.raises(RoundFailedError, match="empty conclusion"):
        await asolve(model, "q", PaCoReConfig(rounds=[2]))
    assert len(model.seen) == 2  # no synthesis call with an empty template


def test_a_failed_round_says_which_trajectories_were_cut_and_why():
    trajectories = [
        {"round_index": 0, "index": 0, "completion_tokens": 40},
        {"round_index": 0, "index": 1, "cut": "early_stop"},
        {"round_index": 0, "index": 2, "cut": "budget_tokens"},
        {"round_index": 0, "index": 3, "cut": "deadline"},
        {"round_index": 0, "index": 4, "error": "HTTP 400", "attempts": 1},
    ]
    error = RoundFailedError(RoundRecord(round_index=0, k=5, trajectories=trajectories))
    assert str(error).split("nothing to pass on: ", 1)[1].split("; ") == [
        "#0 returned an empty conclusion",
        "#1 was cut before it finished (early stop: its round's answers agreed)",
        "#2 was cut before it finished (the token budget ran out)",
        "#3 was cut before it finished (the deadline passed)",
        "#4 failed after 1 attempt(s): HTTP 400",
    ]


def test_tokens_are_counted_when_usage_is_missing():
    model = PromptFunctionChatModel(reply=lambda m: AIMessage(content="<think>abc def</think>ghi"), seen=[])
    result = solve(model, "q", PaCoReConfig(rounds=[1]))
    assert result.ttc > 0
    assert all(t.completion_tokens > 0 for r in result.rounds for t in r.trajectories)


# ---- PaCoReNode -----------------------------------------------------------------------------------


def _graph_with_node(model, **kwargs):
    builder = StateGraph(MessagesState)
    builder.add_node("pacore", PaCoReNode(model, PaCoReConfig(rounds=[2]), **kwargs))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    return builder.compile(checkpointer=InMemorySaver())


async def test_node_appends_one_answer_with_metadata_in_a_multi_turn_graph():
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    graph = _graph_with_node(model)
    conversation = [("system", "be brief"), ("user", "hi"), ("assistant", "hello"), ("user", "2+2?")]
    config = {"configurable": {"thread_id": "a"}}
    out = await graph.ainvoke({"messages": conversation}, config)
    assert len(out["messages"]) == 5
    answer = out["messages"][-1]
    meta = answer.response_metadata["pacore"]
    assert meta["ttc"] == 21 and "answer" not in meta  # the answer is the message's content
    assert [r["k"] for r in meta["rounds"]] == [2, 1] and "failures" not in meta  # none: left out
    # counts only by default: the thread that keeps this message does not keep every conclusion again
    assert [r["completion_tokens"] for r in meta["rounds"]] == [14, 7] and "trajectories" not in meta["rounds"][0]
    assert answer.usage_metadata["output_tokens"] == 21
    # every trajectory saw the whole history; the synthesis wrapped only the last user turn
    assert all(
        [type(m).__name__ for m in seen][:3] == ["SystemMessage", "HumanMessage", "AIMessage"] for seen in model.seen
    )
    # a second turn on the same thread: PaCoRe again over the longer history
    out = await graph.ainvoke({"messages": [("user", "and 3+3?")]}, config)
    assert len(out["messages"]) == 7


def test_node_sync_invoke_and_custom_stream():
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    graph = _graph_with_node(model)
    events = list(
        graph.stream({"messages": [("user", "q")]}, {"configurable": {"thread_id": "s"}}, stream_mode="custom")
    )
    assert [e["event"] for e in events].count("trajectory_finished") == 3
    direct = PaCoReNode(model, PaCoReConfig(rounds=[1])).invoke({"messages": [HumanMessage("x")]})
    assert direct["messages"][0].content.startswith("answer-")


def test_node_names_a_missing_channel():
    node = PaCoReNode(PromptFunctionChatModel(reply=think_reply), messages_key="history")
    with pytest.raises(KeyError, match="history"):
        node.invoke({"messages": []})


class PydanticChat(BaseModel):
    history: Annotated[list[AnyMessage], add_messages]


@dataclass
class DataclassChat:
    history: Annotated[list[AnyMessage], add_messages]


@pytest.mark.parametrize("schema", [PydanticChat, DataclassChat])
async def test_node_reads_the_messages_of_a_pydantic_or_dataclass_state(schema):
    """LangGraph hands such a node the state object itself: the node reads the channel as an attribute."""
    model = PromptFunctionChatModel(reply=think_reply, seen=[])
    builder = StateGraph(schema)
    builder.add_node("pacore", PaCoReNode(model, PaCoReConfig(rounds=[2]), messages_key="history"))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    out = await builder.compile().ainvoke({"history": [("user", "2+2?")]})
    assert [type(m).__name__ for m in out["history"]] == ["HumanMessage", "AIMessage"]
    assert out["history"][-1].content.startswith("answer-") and len(model.seen) == 3


# ---- agent explorer -------------------------------------------------------------------------------


async def test_agent_explorer_runs_whole_episodes_through_the_same_fan_out():
    calls = []

    def agent_step(state: MessagesState):
        last = state["messages"][-1].content
        calls.append(last)
        usage = {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
        return {"messages": [AIMessage(f"patch for {digest(last)}", usage_metadata=usage)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_step)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    agent = builder.compile()
    explorer = AgentExplorer(agent, output=lambda state: state["messages"][-1])
    result = await asolve(explorer, "fix the bug", PaCoReConfig(rounds=[2]), trace=True)
    assert len(calls) == 3 and result.ttc == 12
    assert calls[-1].count(f"patch for {digest('fix the bug')}") == 2  # synthesis saw both episodes' output
    assert len(result.trajectories) == 3 and "state" in result.trajectories[0].extra


class TaskState(MessagesState):
    task: str


def task_agent() -> StateGraph:
    """One step: answers with the task it was given and the number of messages it saw."""

    def step(state: TaskState):
        return {"messages": [AIMessage(f"did {state['task']} after {len(state['messages'])} message(s)")]}

    builder = StateGraph(TaskState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


@pytest.mark.parametrize("isolate", [True, False])
async def test_agent_episodes_get_the_payload_and_hand_records_to_the_sink(tmp_path, isolate):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from pacore_graph import EpisodeContext
    from pacore_graph.graph.runner import PaCoReRunner

    seen: list[EpisodeContext] = []

    def episode_input(messages, episode: EpisodeContext):
        seen.append(episode)
        return {"messages": messages, "task": episode.payload["task"]}

    explorer = AgentExplorer(
        task_agent().compile(),
        input=episode_input,
        output=lambda state: state["messages"][-1],
        record=lambda state, episode: {"round": episode.round_index, "index": episode.index, "final": episode.final},
        isolate=isolate,
    )
    records: list[dict] = []
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.sqlite")) as saver:
        runner = PaCoReRunner(explorer, PaCoReConfig(rounds=[2]), checkpointer=saver)
        result = await runner.arun(
            "fix it", {"configurable": {"thread_id": "t"}}, payload={"task": "T-7"}, on_record=records.append
        )
        namespaces = {c.config["configurable"]["checkpoint_ns"] async for c in saver.alist(None)}
    assert result.answer == "did T-7 after 1 message(s)"
    assert sorted((r["round"], r["index"], r["final"]) for r in records) == [(0, 0, False), (0, 1, False), (1, 0, True)]
    assert all(e.runnable_config["metadata"]["pacore_round"] == e.round_index for e in seen)
    agent_checkpoints = [ns for ns in namespaces if ns.startswith("trajectory:")]
    # isolated episodes are not subgraphs of the PaCoRe graph: their steps are not checkpointed
    assert (agent_checkpoints == []) is isolate


async def test_node_hands_the_enclosing_graphs_runtime_context_to_explorers():
    from dataclasses import dataclass

    @dataclass
    class UserContext:
        user_id: str

    payloads = []

    class Recording:
        async def explore(self, messages, episode) -> Trajectory:
            payloads.append(episode.payload)
            return Trajectory(content=f"for {episode.payload.user_id}", completion_tokens=1)

    builder = StateGraph(MessagesState, context_schema=UserContext)
    builder.add_node("pacore", PaCoReNode(Recording(), PaCoReConfig(rounds=[2])))
    builder.add_edge(START, "pacore")
    builder.add_edge("pacore", END)
    out = await builder.compile().ainvoke({"messages": [("user", "hi")]}, context=UserContext("u-9"))
    assert out["messages"][-1].content == "for u-9" and payloads == [UserContext("u-9")] * 3


async def test_a_crashing_episode_is_recorded_and_left_out():
    def agent_step(state: MessagesState):
        if "Reference" not in state["messages"][-1].content and len(state["messages"]) == 1:
            raise RuntimeError("sandbox exploded")
        return {"messages": [AIMessage("never")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_step)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    explorer = AgentExplorer(builder.compile(), output=lambda state: state["messages"][-1])
    with pytest.raises(RoundFailedError, match="sandbox exploded"):
        await asolve(explorer, "fix", PaCoReConfig(rounds=[2]))


def test_ttc_is_marked_approximate_exactly_when_it_is_estimated():
    from pacore_graph.synthesis.tokens import count_tokens

    model = PromptFunctionChatModel(reply=lambda m: AIMessage(content="<think>abc def</think>ghi"), seen=[])
    result = solve(model, "q", PaCoReConfig(rounds=[1]))
    _, estimated = count_tokens("abc def ghi")  # offline (no tiktoken file) this is an estimate
    assert result.ttc_approximate is estimated
    with_usage = solve(PromptFunctionChatModel(reply=think_reply, seen=[]), "q", PaCoReConfig(rounds=[1]))
    assert with_usage.ttc == 14 and not with_usage.ttc_approximate  # server usage is exact and comes first


def test_serve_vllm_says_what_is_missing(capsys):
    import importlib.util

    from pacore_graph.cli import main
    from pacore_graph.models.vllm_server import vllm_command

    command = vllm_command("stepfun-ai/PaCoRe-8B", port=8001)
    assert command[1:3] == ["serve", "stepfun-ai/PaCoRe-8B"]
    for flag in ("--reasoning-parser", "--enable-prefix-caching", "--max-model-len"):
        assert flag in command
    assert command[command.index("--max-model-len") + 1] == "131072"
    if importlib.util.find_spec("vllm") is None:  # this machine: no vLLM, no GPU
        assert main(["serve-vllm", "stepfun-ai/PaCoRe-8B"]) == 1
        assert "vLLM is not installed" in capsys.readouterr().err
