"""What a run sends over HTTP, recorded at a scripted OpenAI-compatible server.

The expectations are written out independently of the implementation: the paper's Table 6 text as a
literal, and the reference pipeline's ordering rule (stable sort by raw content length, then
``random.Random(42).shuffle``).
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from pacore_graph import PaCoReConfig, PaCoReError, RoundFailedError, asolve, chat_model
from pacore_graph.extend import RetryPolicy
from pacore_graph.models import OpenAICompatibleChatModel

TABLE_6 = (
    "You are given a problem and a list of reference responses. Your job is to analyze these references and "
    "provide your own response.\n\nOriginal Problem:\n{problem}\n\nReference Responses:\n{refs}\n\nNow, based on "
    "the original problem and reference responses above, please provide your own comprehensive solution."
)
FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.02)

CONVERSATION = [
    {"role": "system", "content": "You are a careful mathematician."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 17*23?"},
]


def table_6(problem: str, references: list[str]) -> str:
    refs = "".join(f"\nReference {i}:\n{ref}\n" for i, ref in enumerate(references, 1))
    return TABLE_6.format(problem=problem, refs=refs)


def reference_order(contents: list[str], seed: int = 42) -> list[str]:
    ordered = sorted(contents, key=len)
    random.Random(seed).shuffle(ordered)
    return ordered


def tag(body: dict) -> str:
    return hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()[:6]


def numbered_reply(style: str):
    """The n-th request for a prompt gets a conclusion of distinct length n, so the order is checkable."""

    def handler(body: dict, attempt: int):
        conclusion = f"ans-{tag(body)}-" + "x" * attempt
        if style == "fields":
            return {"content": conclusion, "reasoning_content": f"secret reasoning {attempt}"}
        return {"content": f"<think>secret reasoning {attempt}</think>{conclusion}"}

    return handler


def rounds_of(requests: list[dict]) -> list[list[dict]]:
    """Group recorded requests by their message list (one group per round, in first-seen order)."""
    groups: dict[str, list[dict]] = {}
    for body in requests:
        groups.setdefault(json.dumps(body["messages"], sort_keys=True), []).append(body)
    return list(groups.values())


@pytest.mark.parametrize("style", ["fields", "tags"])
async def test_schedule_3_2_sends_what_the_reference_pipeline_sends(mock_server, style):
    with mock_server(numbered_reply(style)) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, CONVERSATION, PaCoReConfig(rounds=[3, 2]))
        await model.aclose()
    rounds = rounds_of(server.requests)
    assert [len(r) for r in rounds] == [3, 2, 1]
    for body in server.requests:
        assert set(body) == {"model", "messages", "temperature", "top_p"}  # no max_tokens, no n
        assert (body["model"], body["temperature"], body["top_p"]) == ("mock-model", 1.0, 1.0)
    first = rounds[0][0]["messages"]
    assert first == CONVERSATION  # round 1: the caller's messages unchanged
    previous = first
    for k_previous, round_requests in zip([3, 2], rounds[1:], strict=True):
        messages = round_requests[0]["messages"]
        # history, system and earlier turns intact: only the last user message differs
        assert messages[:-1] == CONVERSATION[:-1]
        assert messages[-1]["role"] == "user"
        conclusions = [f"ans-{tag({'messages': previous})}-" + "x" * n for n in range(1, k_previous + 1)]
        assert messages[-1]["content"] == table_6("And 17*23?", reference_order(conclusions))
        assert "secret reasoning" not in messages[-1]["content"]  # compaction dropped the reasoning
        previous = messages
    assert result.answer == f"ans-{tag({'messages': previous})}-x"
    assert [r.k for r in result.rounds] == [3, 2, 1]
    assert result.ttc == 6 * 5  # six trajectories, 5 completion tokens each (server usage)


async def test_transient_errors_are_retried_and_client_errors_are_not(mock_server):
    def handler(body, attempt):
        if body["messages"][-1]["content"] == "bad request":
            return 400
        return 503 if attempt <= 2 else {"content": "fine"}

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "retry me", PaCoReConfig(rounds=[1], retry=FAST_RETRY))
        assert result.answer == "fine"
        assert result.rounds[0].trajectories[0].attempts == 3
        server.requests.clear()
        with pytest.raises(RoundFailedError, match="HTTP 400"):
            await asolve(model, "bad request", PaCoReConfig(rounds=[2], retry=FAST_RETRY))
        assert len(server.requests) == 2  # one attempt per trajectory: 4xx is never retried
        await model.aclose()


async def test_failed_trajectories_are_recorded_and_left_out(mock_server):
    def handler(body, attempt):
        content = body["messages"][-1]["content"]
        if content == "problem" and attempt in (1, 2, 3):  # the first three arrivals fail for good
            return 500
        return {"content": f"ok-{attempt}"}

    retry = RetryPolicy(max_attempts=1)
    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        result = await asolve(model, "problem", PaCoReConfig(rounds=[4], retry=retry))
        await model.aclose()
    first = result.rounds[0]
    assert len(first.failures) == 3 and all("HTTP 500" in f.error for f in first.failures)
    assert first.references == ["ok-4"]
    synthesis = server.requests[-1]["messages"][-1]["content"]
    assert synthesis == table_6("problem", ["ok-4"])
    assert len(result.failures) == 3


async def test_a_round_where_every_trajectory_fails_raises_a_clear_error(mock_server):
    with mock_server(lambda body, attempt: 500) as server:
        model = chat_model(server.base_url)
        with pytest.raises(RoundFailedError) as caught:
            await asolve(model, "doomed", PaCoReConfig(rounds=[3], retry=FAST_RETRY))
        await model.aclose()
    message = str(caught.value)
    assert "round 1" in message and "none of its 3 trajectories" in message and "HTTP 500" in message
    assert len(server.requests) == 9  # 3 trajectories x 3 attempts; never a synthesis with no references
    assert all(body["messages"][-1]["content"] == "doomed" for body in server.requests)


async def test_an_empty_final_answer_is_an_error_not_a_silent_empty_answer(mock_server):
    def handler(body, attempt):
        if body["messages"][-1]["content"].startswith("You are given a problem"):
            return {"content": "", "reasoning_content": "thought forever", "finish_reason": "length"}
        return {"content": "a conclusion"}

    with mock_server(handler) as server:
        model = chat_model(server.base_url)
        with pytest.raises(RoundFailedError, match="cut off by the length limit"):
            await asolve(model, "q", PaCoReConfig(rounds=[2]))
        await model.aclose()


async def test_sampling_settings_and_token_cap_reach_the_request(mock_server):
    with mock_server(lambda body, attempt: {"content": "x"}) as server:
        model = chat_model(server.base_url)
        await asolve(model, "q", PaCoReConfig(rounds=[1], temperature=0.6, top_p=0.95, max_tokens=64))
        await model.aclose()
    assert all((b["temperature"], b["top_p"], b["max_tokens"]) == (0.6, 0.95, 64) for b in server.requests)


def test_one_server_per_model_and_several_urls_point_at_the_router():
    urls = ["http://a:1/v1", "http://b:1/v1"]
    for several in (lambda: chat_model(urls, model="m"), lambda: OpenAICompatibleChatModel(base_url=urls, model="m")):
        with pytest.raises(PaCoReError, match=r"^2 base URLs given; .*vllm-router \(`pacore serve-vllm --replicas N`"):
            several()


async def test_requests_carry_the_session_key_of_the_prefix_they_share(mock_server):
    """vllm-router's keyed policies follow X-Session-ID: a problem's K trajectories share their round's key; a
    conversation keeps one key over every round (its history is what they share); problems differ. A short
    prompt, cheap to prefill anywhere, gets a fresh key per request, so that its round spreads over replicas."""
    padding = " Show every step." * 300  # over a thousand tokens: worth keeping on one replica
    history = [
        {**message, "content": message["content"] + padding} if message["role"] == "system" else message
        for message in CONVERSATION
    ]
    with mock_server(lambda body, attempt: {"content": "r"}) as server:
        model = chat_model(server.base_url)
        await asolve(model, "first problem" + padding, PaCoReConfig(rounds=[3]))
        await asolve(model, "second problem" + padding, PaCoReConfig(rounds=[3]))
        await asolve(model, history, PaCoReConfig(rounds=[3]))
        await asolve(model, "a short problem", PaCoReConfig(rounds=[3]))
        await model.aclose()
    keys = {}
    for body, key in zip(server.requests[:12], server.sessions[:12], strict=True):
        keys.setdefault(json.dumps(body["messages"]), set()).add(key)
    assert all(len(found) == 1 and None not in found for found in keys.values())  # one key per long prompt
    first, second, chat, short = (server.sessions[start : start + 4] for start in (0, 4, 8, 12))
    assert len(set(first[:3])) == 1 and first[3] != first[0]  # round 1 alike; the synthesis prompt its own
    assert not set(first) & set(second)
    assert len(set(chat)) == 1 and not set(chat) & set(first + second)  # the history before the last turn
    assert len(set(short)) == 4 and None not in short  # each request of the short problem its own key
