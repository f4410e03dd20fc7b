"""``compat="reference"`` sends what the reference pipeline (stepfun-ai/PaCoRe ``base_exp.py``) sends where
replies are odd, recorded at a scripted server.

The expectations are written from the reference's code, not from ours: a reply becomes a reference when its
raw ``content`` is not empty (``if r.get("content")``), as the text after its last ``</think>`` or the whole
text (``parse_answer``); the round's replies are sorted by raw length and shuffled with ``Random(42)``
(``_run_parallel_calls``); a round with none carries on; the answer is the final call's raw content; every
error is retried, and a 400 saying "reduce the length" drops ``max_tokens`` (``async_chat_completion``).
``scripts/reference_parity.py`` runs the reference pipeline itself against the same kind of server.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt
from test_conformance import table_6

from pacore_graph import AgentExplorer, PaCoReConfig, PaCoReNode, RoundFailedError, asolve, chat_model
from pacore_graph.coordination import EarlyStop
from pacore_graph.extend import RetryPolicy, message_text

NO_WAIT = RetryPolicy(max_attempts=5, initial_delay=0, max_delay=0)
TOO_LONG = (
    400,
    "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (4904 in the "
    "messages, 4096 in the completion). Please reduce the length of the messages or completion.",
)


def reference_texts(contents: list[str]) -> list[str]:
    """The reference's references from a round's raw contents (a failed call counts as "")."""
    ordered = sorted(contents, key=len)
    random.Random(42).shuffle(ordered)
    return [content.split("</think>")[-1] for content in ordered if content]


def is_synthesis(body: dict) -> bool:
    return body["messages"][-1]["content"].startswith("You are given a problem")


def reference(**settings) -> PaCoReConfig:
    return PaCoReConfig(compat="reference", retry=NO_WAIT, **settings)


ODD = {
    1: {"content": "<think>nothing after the tag</think>"},
    2: {"content": "<think>unclosed reasoning cut by the limit", "finish_reason": "length"},
    3: 500,
    4: {"content": "   "},
    5: {"content": "<think>sums</think>It is 5."},
}
ODD_CONTENTS = [ODD[n]["content"] for n in (1, 2, 4, 5)]  # what the four trajectories end with
FINAL = "<think>final reasoning</think>Five."


async def test_odd_replies_are_passed_on_as_the_reference_passes_them_and_the_answer_is_raw(mock_server):
    def handler(body, attempt):
        return {"content": FINAL} if is_synthesis(body) else ODD[attempt]

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "What is 2+3?", reference(rounds=[4]))
        await model.aclose()
    first = [body for body in server.requests if not is_synthesis(body)]
    synthesis = [body for body in server.requests if is_synthesis(body)]
    assert len(first) == 5 and len(synthesis) == 1  # the 500 was retried once
    expected = reference_texts(ODD_CONTENTS)
    # sorted by length: "   ", "<think>sums</think>...", "<think>nothing...</think>", "<think>unclosed..."
    assert expected == ["", "It is 5.", "<think>unclosed reasoning cut by the limit", "   "]
    assert synthesis[0]["messages"][-1]["content"] == table_6("What is 2+3?", expected)
    assert all(set(body) == {"model", "messages", "temperature", "top_p"} for body in server.requests)
    assert result.answer == FINAL  # the final call's raw content, <think> block included
    assert result.rounds[0].reference_order and len(result.rounds[0].reference_order) == 4


async def test_a_round_in_which_everything_failed_carries_on_with_no_references(mock_server):
    with mock_server(lambda body, attempt: {"content": FINAL} if is_synthesis(body) else 503) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "What is 4+4?", reference(rounds=[3]))
        await model.aclose()
    synthesis = [body for body in server.requests if is_synthesis(body)]
    assert len(server.requests) == 3 * 5 + 1  # five attempts each, then the synthesis over nothing
    assert synthesis[0]["messages"][-1]["content"] == table_6("What is 4+4?", [])
    assert result.answer == FINAL and len(result.failures) == 3


async def test_every_status_is_retried(mock_server):
    def handler(body, attempt):
        if is_synthesis(body):
            return {"content": "done"}
        return {1: 404, 2: 400, 3: 401}.get(attempt, {"content": "ok" + "!" * attempt})

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", reference(rounds=[2]))
        await model.aclose()
    assert len(server.requests) == 3 + 2 + 1  # three refusals retried, two replies, one synthesis
    assert server.requests[-1]["messages"][-1]["content"] == table_6("q", reference_texts(["ok!!!!", "ok!!!!!"]))
    assert result.answer == "done"


async def test_a_prompt_refused_as_too_long_is_retried_without_max_tokens(mock_server):
    def handler(body, attempt):
        if "max_tokens" in body:
            return TOO_LONG
        return {"content": "short"} if not is_synthesis(body) else {"content": "final"}

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "q", reference(rounds=[2], max_tokens=4096))
        await model.aclose()
    bodies = Counter((is_synthesis(body), body.get("max_tokens")) for body in server.requests)
    assert bodies == {(False, 4096): 2, (False, None): 2, (True, 4096): 1, (True, None): 1}
    assert result.answer == "final"


async def test_a_refusal_with_no_max_tokens_left_ends_the_call_and_an_empty_answer_is_returned(mock_server):
    def handler(body, attempt):
        return TOO_LONG if is_synthesis(body) else {"content": "a reference"}

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        capped = await asolve(model, "q", reference(rounds=[1], max_tokens=4096))
        sent_capped = len(server.requests)
        server.requests.clear()
        uncapped = await asolve(model, "q", reference(rounds=[1]))
        await model.aclose()
    assert sent_capped == 1 + 2  # the synthesis: with max_tokens, then without, then given up
    assert len(server.requests) == 1 + 1  # nothing to drop: given up at once
    assert capped.answer == uncapped.answer == ""  # the reference's final_response of a failed call


async def test_without_compat_the_same_replies_get_this_projects_rules(mock_server):
    def handler(body, attempt):
        if "4+4" in body["messages"][-1]["content"]:
            return 503
        return {"content": FINAL} if is_synthesis(body) else ODD[attempt]

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "What is 2+3?", PaCoReConfig(rounds=[4], retry=NO_WAIT))
        with pytest.raises(RoundFailedError):
            await asolve(model, "What is 4+4?", PaCoReConfig(rounds=[3], retry=NO_WAIT))
        await model.aclose()
    synthesis = [body for body in server.requests if is_synthesis(body)]
    assert len(synthesis) == 1 and synthesis[0]["messages"][-1]["content"] == table_6("What is 2+3?", ["It is 5."])
    assert result.answer == "Five."


def test_options_the_reference_has_not_are_refused_with_compat():
    with pytest.raises(ValueError, match="reference pipeline, which has no answer_extractor, early_stop"):
        PaCoReConfig(compat="reference", answer_extractor="boxed", early_stop=EarlyStop(agree=2))
    with pytest.raises(ValueError, match="reference_order='index'"):
        PaCoReConfig(compat="reference", reference_order="index")


@pytest.mark.parametrize("compat", [None, "reference"])
async def test_an_agents_interrupt_reaches_the_caller_and_is_never_retried(compat):
    """Every error is retried under compat='reference', but a LangGraph interrupt is not an error: it stops the
    run where it is (for a human to answer), so it propagates out of the PaCoRe run untouched, in either mode."""
    asked: list[str] = []

    def ask(state: MessagesState) -> dict:
        asked.append(message_text(state["messages"][-1]))
        return {"messages": [AIMessage(interrupt("may I run `rm -rf build`?"))]}

    agent = StateGraph(MessagesState)
    agent.add_node("ask", ask)
    agent.add_edge(START, "ask")
    explorer = AgentExplorer(agent.compile(), output=lambda state: state["messages"][-1])
    config = PaCoReConfig(rounds=[2], compat=compat, retry=RetryPolicy(max_attempts=3, initial_delay=0))
    user = StateGraph(MessagesState)
    user.add_node("pacore", PaCoReNode(explorer, config))
    user.add_edge(START, "pacore")
    graph = user.compile(checkpointer=InMemorySaver())
    state = await graph.ainvoke({"messages": [("user", "clean the build")]}, {"configurable": {"thread_id": "t"}})
    assert [i.value for i in state["__interrupt__"]] == ["may I run `rm -rf build`?"] * 2  # round 1's two episodes
    assert asked == ["clean the build"] * 2, "each episode ran once: the interrupt was not retried"
    with pytest.raises(GraphInterrupt) as raised:  # run on its own, the PaCoRe run raises it
        await asolve(explorer, "clean the build", config)
    assert [i.value for i in raised.value.args[0]] == ["may I run `rm -rf build`?"] * 2
    assert len(asked) == 4
