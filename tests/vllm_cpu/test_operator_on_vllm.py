"""The operator on real vLLM, counted by vLLM itself: requests per run, the prefix cache a round shares, the context
window, vLLM's 400s, and cancellation."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import END, START, MessagesState, StateGraph
from real_vllm import MODEL, REPLY_CAP, WINDOW
from waits import await_until

from pacore_graph import PaCoReConfig, PaCoReNode, RoundFailedError, asolve, chat_model, solve
from pacore_graph.synthesis.tokens import count_tokens

BLOCK = 32  # the fixture's --block-size: vLLM's CPU backend counts cache hits in whole blocks
QUESTION = "Explain in two sentences why the sky is blue, then give a one-word summary."


class RoundMarks(BaseCallbackHandler):
    """vLLM's counters as each PaCoRe round starts (its first trajectory's chat-model run): rounds run one after
    another, so the difference between two marks is what one round cost vLLM."""

    def __init__(self, vllm: Any) -> None:
        self.vllm = vllm
        self.marks: dict[int, dict[str, float]] = {}

    def on_chat_model_start(self, serialized, messages, *, metadata=None, **kwargs) -> None:
        round_index = (metadata or {}).get("pacore_round")
        if round_index is not None and round_index not in self.marks:
            self.marks[round_index] = self.vllm.metrics()


def test_pacore_node_sends_exactly_sum_k_plus_one_requests_and_rounds_share_their_prompt(vllm):
    """[3, 3, 3]: 10 requests; in rounds 2 and 3 the K trajectories send one prompt, which vLLM computes once."""
    vllm.wait_idle()
    rounds = [3, 3, 3]
    builder = StateGraph(MessagesState)
    builder.add_node(
        "think", PaCoReNode(chat_model(vllm.base_url, MODEL, max_tokens=REPLY_CAP), PaCoReConfig(rounds=rounds))
    )
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    marks = RoundMarks(vllm)
    before = vllm.metrics()
    out = builder.compile().invoke({"messages": [("user", QUESTION)]}, {"callbacks": [marks]})
    after = vllm.metrics()
    assert out["messages"][-1].type == "ai" and out["messages"][-1].content
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == sum(rounds) + 1
    marks.marks[len(rounds) + 1] = after
    for round_index in (1, 2):  # rounds 2 and 3: the same synthesis prompt K times
        start, end = marks.marks[round_index], marks.marks[round_index + 1]
        prompt = end["vllm:prompt_tokens_total"] - start["vllm:prompt_tokens_total"]
        hits = end["vllm:prefix_cache_hits_total"] - start["vllm:prefix_cache_hits_total"]
        k = rounds[round_index]
        # n=K sampling would compute the prompt once: (K-1)/K of it from the cache, less the partial last block
        assert hits >= (k - 1) / k * prompt - (k - 1) * BLOCK, (round_index, hits, prompt)


def test_a_synthesis_prompt_over_the_window_still_finishes(vllm):
    """A problem of about 1,800 tokens and two references of 200: over the served window (2048) together. The
    window is learned from vLLM's /v1/models and the references are cut to fit, so the synthesis is answered, not
    refused with a 400."""
    vllm.wait_idle()
    problem = "The quick brown fox jumps over the lazy dog. " * 160 + "How many times did the fox jump?"
    model = chat_model(vllm.base_url, MODEL, max_tokens=200, extra_body={"min_tokens": 200})
    assert model.profile == {"max_input_tokens": WINDOW}
    before = vllm.metrics()
    result = solve(model, problem, PaCoReConfig(rounds=[2]))
    after = vllm.metrics()
    conclusions = [trajectory.conclusion or "" for trajectory in result.rounds[0].trajectories]
    assert count_tokens(problem)[0] + sum(count_tokens(conclusion)[0] for conclusion in conclusions) > WINDOW
    assert result.answer and after["vllm:request_success_total"] - before["vllm:request_success_total"] == 3


def http_4xx(vllm) -> float:
    """Chat requests vLLM answered with a 4xx (its HTTP instrumentation's counter)."""
    with urllib.request.urlopen(f"{vllm.root}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith('http_requests_total{handler="/v1/chat/completions"') and 'status="4xx"' in line
    )


def test_vllms_400_is_a_clear_error_and_never_retried(vllm):
    """A problem longer than the model's whole context: each of the K trajectories is refused once (no retry),
    and the error names the HTTP status and what it means."""
    problem = "The quick brown fox jumps over the lazy dog. " * 300
    model = chat_model(vllm.base_url, MODEL, max_tokens=REPLY_CAP)
    before = http_4xx(vllm)
    with pytest.raises(RoundFailedError) as failed:
        solve(model, problem, PaCoReConfig(rounds=[3]))
    assert http_4xx(vllm) - before == 3  # one request per trajectory: a 400 is not retried
    text = str(failed.value)
    assert "HTTP 400" in text and "does not fit the model's context" in text
    assert all(t.error_status == 400 and not t.error_transient for t in failed.value.round.trajectories)


async def test_cancelling_a_run_empties_vllms_running_requests(vllm):
    """Cancel a run mid-round: vLLM aborts every request within seconds (none keeps generating)."""
    vllm.wait_idle()
    model = chat_model(vllm.base_url, MODEL, max_tokens=1500, extra_body={"min_tokens": 1500})
    before = vllm.metrics()
    run = asyncio.create_task(asolve(model, QUESTION, PaCoReConfig(rounds=[4])))
    await await_until(lambda: vllm.metrics().get("vllm:num_requests_running", 0) == 4, 30, what="4 requests in vLLM")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await await_until(lambda: vllm.running() == 0, 5, what=lambda: f"vLLM still runs {vllm.running()} requests")
    after = vllm.metrics()
    finished = [f"vllm:request_success_total{{{reason}}}" for reason in ("stop", "length")]
    assert sum(after[name] - before[name] for name in finished) == 0  # aborted, none ran to its end
