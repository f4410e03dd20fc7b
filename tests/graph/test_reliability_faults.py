"""Faults: a flaky server (HTTP 500/503, dropped connections, hung requests, broken JSON, cut streams)
costs retries, not answers; what still fails is recorded with its reason; nothing is duplicated.

All on the serving emulator over real loopback HTTP.
"""

from __future__ import annotations

import pytest
from waits import wait_until

from pacore_benchmarks.perf.faults import FaultSettings, run_fault_scenario
from pacore_emulator import Emulator, EmulatorConfig, FaultRates
from pacore_graph import PaCoReConfig, RoundFailedError
from pacore_graph.extend import ChatExplorer, RetryPolicy
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel

EVERY_FAULT = FaultRates(http_500=0.05, http_503=0.03, drop=0.04, timeout=0.02, malformed=0.03, cut_stream=0.03)
FAST_RETRY = RetryPolicy(max_attempts=8, initial_delay=0.02, max_delay=0.2)


async def failed_run(base_url: str, config: PaCoReConfig, model_name: str = "mock-model") -> RoundFailedError:
    """The error of a run that must fail, over this project's client."""
    model = OpenAICompatibleChatModel(base_url=base_url, model=model_name)
    try:
        with pytest.raises(RoundFailedError) as caught:
            await PaCoReRunner(model, config).arun("problem")
    finally:
        await model.aclose()
    return caught.value


async def test_flaky_server_costs_retries_not_answers(tmp_path):
    settings = FaultSettings(problems=6, rounds=[8], faults=EVERY_FAULT, request_timeout=1.5)
    report = await run_fault_scenario(settings, tmp_path)
    assert report.answered == report.problems == 6
    assert report.duplicates == 0 and report.lost == 0
    assert report.trajectories == 6 * (8 + 1)
    assert sum(report.faults_injected.values()) > 0
    # Exact accounting: each injected fault cost one retry, and the server saw nothing else.
    assert report.retries == sum(report.faults_injected.values()) - report.failed_trajectories
    assert report.requests == report.trajectories + report.retries


async def test_streamed_replies_survive_cut_streams_and_broken_events():
    faults = FaultRates(cut_stream=0.15, malformed=0.1, drop=0.05)
    config = PaCoReConfig(rounds=[6], stream=True, retry=FAST_RETRY, request_timeout=5)
    with Emulator(EmulatorConfig(ttft=0.01, token_delay=0.0005, output_tokens=(40, 120), faults=faults)) as emu:
        model = OpenAICompatibleChatModel(base_url=emu.base_url, model=emu.config.model)
        runner = PaCoReRunner(model, config)
        try:
            results = [await runner.arun(f"problem {i}") for i in range(3)]
        finally:
            await model.aclose()
        stats = emu.stats()
    assert all(r.answer.strip() for r in results)
    attempts = sum(t.attempts for r in results for round_ in r.rounds for t in round_.trajectories)
    assert sum(stats["faults"].values()) > 0
    assert stats["requests"] == attempts
    assert attempts == 3 * 7 + sum(stats["faults"].values())  # each fault cost exactly one retry
    assert not any(r.failures for r in results)


class PartlyMisnamed:
    """Trajectories 1 and 3 of the first round ask for a model the server does not have (HTTP 404,
    never retried): deterministic failures among transient ones."""

    def __init__(self, good: OpenAICompatibleChatModel, config: PaCoReConfig):
        bad = OpenAICompatibleChatModel(base_url=good.base_url, model="no-such-model")
        self.good, self.bad = ChatExplorer(good, config), ChatExplorer(bad, config)

    async def explore(self, messages, episode):
        round_index, index = episode.round_index, episode.index
        chosen = self.bad if round_index == 0 and index in (1, 3) else self.good
        return await chosen.explore(messages, episode)


async def test_trajectories_that_still_fail_are_recorded_with_their_reason_and_left_out():
    config = PaCoReConfig(rounds=[6], retry=FAST_RETRY, request_timeout=5)
    faults = FaultRates(http_500=0.1, drop=0.05)
    with Emulator(EmulatorConfig(ttft=0.01, token_delay=0.0005, faults=faults)) as emu:
        model = OpenAICompatibleChatModel(base_url=emu.base_url, model=emu.config.model)
        explorer = PartlyMisnamed(model, config)
        try:
            result = await PaCoReRunner(explorer, config).arun("problem")
        finally:
            await model.aclose()
            await explorer.bad.model.aclose()
    first = result.rounds[0]
    assert [t.index for t in first.trajectories] == list(range(6))
    assert [t.index for t in result.failures] == [1, 3]
    for failure in result.failures:
        assert "HTTP 404" in failure.error and "wrong model name" in failure.error
        assert failure.attempts == 1  # a 4xx is the caller's mistake: never retried
    assert len(first.references) == 4
    assert result.answer.strip()


async def test_a_round_where_every_trajectory_fails_raises_one_clear_error():
    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=2, initial_delay=0), request_timeout=5)
    with Emulator(EmulatorConfig(ttft=0.01, faults=FaultRates(http_500=1.0))) as emu:
        failure = await failed_run(emu.base_url, config, emu.config.model)
        assert emu.stats()["requests"] == 4 * 2
    message = str(failure)
    assert "round 1: none of its 4 trajectories" in message
    assert "failed after 2 attempt(s)" in message and "HTTP 500" in message
    assert "\n" not in message


async def test_a_failed_synthesis_error_carries_the_proposals_and_their_tokens(mock_server):
    """The synthesis fails for good: the error holds the round before it (every proposal's record and token
    counts) and says so in its one line, and its token total covers everything the run spent."""

    def synthesis_down(body, attempt):
        if "Reference Responses" in str(body["messages"][-1]["content"]):
            return 500
        return {"content": "a proposal", "reasoning_content": "thinking"}

    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    with mock_server(synthesis_down) as server:
        error = await failed_run(server.base_url, config)
    assert error.round_index == 1 and [done.round_index for done in error.finished] == [0]
    (proposals,) = error.finished
    assert [t.conclusion for t in proposals.trajectories] == ["a proposal"] * 4
    assert proposals.completion_tokens > 0 and error.completion_tokens == proposals.completion_tokens
    assert f"4 trajectories, {proposals.completion_tokens} completion tokens" in str(error)
    assert "\n" not in str(error)


SPENT_BUT_BROKEN = b'{"usage": {"prompt_tokens": 11, "completion_tokens": 40}, "choices": []}'  # 200, no reply


async def test_tokens_of_failed_attempts_count_when_the_server_reported_them(mock_server):
    """Two proposals' first attempts come back with usage (40 tokens each) but no choices, and are retried:
    their tokens are in those trajectories' records, the run's TTC and the answer's usage (5 per good reply)."""
    proposals: list[int] = []

    def first_two_broken(body, attempt):
        if "Reference Responses" in str(body["messages"][-1]["content"]):
            return {"content": "the synthesis"}
        proposals.append(1)
        return SPENT_BUT_BROKEN if len(proposals) <= 2 else {"content": "a proposal"}

    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    with mock_server(first_two_broken) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="mock-model")
        try:
            result = await PaCoReRunner(model, config).arun("problem")
        finally:
            await model.aclose()
    tokens = sorted((t.attempts, t.completion_tokens, t.prompt_tokens) for t in result.rounds[0].trajectories)
    assert tokens == [(1, 5, 11), (1, 5, 11), (2, 45, 22), (2, 45, 22)]
    assert result.ttc == 4 * 5 + 2 * 40 + 5
    assert result.message.usage_metadata["output_tokens"] == result.ttc
    assert result.message.usage_metadata["input_tokens"] == 6 * 11 + 11


async def test_a_failed_synthesis_counts_the_tokens_its_attempts_spent(mock_server):
    def synthesis_broken(body, attempt):
        if "Reference Responses" in str(body["messages"][-1]["content"]):
            return SPENT_BUT_BROKEN
        return {"content": "a proposal"}

    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0))
    with mock_server(synthesis_broken) as server:
        error = await failed_run(server.base_url, config)
    (synthesis,) = error.round.trajectories
    assert synthesis.failed and synthesis.attempts == 2 and synthesis.completion_tokens == 2 * 40
    assert error.completion_tokens == 4 * 5 + 2 * 40


async def test_a_failed_agent_episode_counts_the_tokens_its_model_calls_spent(mock_server):
    """An episode that dies after a model call (its sandbox gone, say) leaves no state to sum usage over: the
    tokens its calls spent still reach the failed record, as the callbacks saw them."""
    from langchain_core.runnables import RunnableLambda

    from pacore_graph import AgentExplorer

    with mock_server(lambda body, attempt: {"content": "a step"}) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="mock-model")

        async def dies_after_one_step(state, config):
            await model.ainvoke(state["messages"], config)
            raise RuntimeError("the sandbox went away")

        explorer = AgentExplorer(RunnableLambda(dies_after_one_step), output=lambda state: "unreached")
        try:
            with pytest.raises(RoundFailedError) as caught:
                await PaCoReRunner(explorer, PaCoReConfig(rounds=[2])).arun("problem")
        finally:
            await model.aclose()
    records = caught.value.round.trajectories
    assert [(t.error, t.prompt_tokens, t.completion_tokens) for t in records] == [
        ("RuntimeError: the sandbox went away", 11, 5)
    ] * 2


async def test_a_timed_out_request_says_how_long_it_was_given(mock_server):
    """asyncio's TimeoutError has no text; the failure says what ran out and after how long."""
    config = PaCoReConfig(rounds=[1], request_timeout=0.3, retry=RetryPolicy(max_attempts=2, initial_delay=0))
    with mock_server(lambda body, attempt: {"content": "late", "delay": 5}) as server:
        failure = await failed_run(server.base_url, config)
    (record,) = failure.round.trajectories
    assert record.error == "TimeoutError: no complete reply within 0.3 s (PaCoReConfig.request_timeout)"
    assert record.attempts == 2 and "failed after 2 attempt(s): TimeoutError: no complete reply" in str(failure)


@pytest.mark.parametrize("header", ["seconds", "http-date"])
async def test_retry_after_is_waited_before_the_retry(mock_server, header):
    """A 429 with ``Retry-After: 2`` (seconds, or the HTTP date 2 s on) for 2 of 4 proposals: those two retry
    no sooner than asked (the backoff alone is 0.01 s), and the answer comes."""
    import email.utils
    import time

    proposals: list[float] = []  # when each proposal request arrived

    def rate_limited(body, attempt):
        if "Reference Responses" in str(body["messages"][-1]["content"]):
            return {"content": "the synthesis"}
        proposals.append(time.monotonic())
        if len(proposals) <= 2:
            wait = "2" if header == "seconds" else email.utils.formatdate(time.time() + 2, usegmt=True)
            return 429, "rate limited", {"Retry-After": wait}
        return {"content": "a proposal"}

    config = PaCoReConfig(rounds=[4], retry=RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.01))
    with mock_server(rate_limited) as server:
        model = OpenAICompatibleChatModel(base_url=server.base_url, model="mock-model")
        try:
            result = await PaCoReRunner(model, config).arun("problem")
        finally:
            await model.aclose()
    assert result.answer == "the synthesis" and len(server.requests) == 4 + 2 + 1
    assert sorted(t.attempts for t in result.rounds[0].trajectories) == [1, 1, 2, 2]
    waited = min(proposals[4:]) - max(proposals[:2])
    assert waited >= (1.9 if header == "seconds" else 1.0), waited  # an HTTP date has whole seconds


async def test_a_retry_after_longer_than_allowed_fails_at_once_and_says_so(mock_server):
    """Asked to wait longer than ``RetryPolicy.max_retry_after``, the trajectory fails now (one request), and the
    failure says how long the server asked for."""
    config = PaCoReConfig(rounds=[1], retry=RetryPolicy(max_attempts=3, initial_delay=0.01, max_retry_after=5))
    with mock_server(lambda body, attempt: (429, "slow down", {"Retry-After": "30"})) as server:
        failure = await failed_run(server.base_url, config)
    assert len(server.requests) == 1
    assert "failed after 1 attempt(s): ModelRequestError: HTTP 429" in str(failure)
    assert "(Retry-After: 30 s)" in str(failure)


@pytest.mark.parametrize("client", ["chat_model", "ChatOpenAI"])
def test_a_timed_out_call_of_a_sync_agent_is_closed_before_its_retry(mock_server, client):
    """Sync ``create_agent`` with ``PaCoReMiddleware`` (``request_timeout=2``): two proposals hang. Their
    requests are closed upstream as they time out (before their retries go out), and no handler thread
    outlives the call. A default ChatOpenAI (2 retries of its own, no timeout) sends no request more."""
    import threading

    from langchain.agents import create_agent

    from pacore_graph import PaCoReMiddleware, chat_model

    proposals: list[int] = []

    def two_hang(body, attempt):
        if "Reference Responses" in str(body["messages"][-1]["content"]):
            return {"content": "the synthesis"}
        proposals.append(1)
        return {"content": "late", "delay": 30} if len(proposals) <= 2 else {"content": "a proposal"}

    config = PaCoReConfig(rounds=[4], request_timeout=2, retry=RetryPolicy(max_attempts=2, initial_delay=0))
    with mock_server(two_hang) as server:
        if client == "chat_model":
            model = chat_model(server.base_url)
        else:
            from langchain_openai import ChatOpenAI

            model = ChatOpenAI(base_url=server.base_url, api_key="unused", model="mock-model")
        agent = create_agent(model, [], middleware=[PaCoReMiddleware(config)])
        out = agent.invoke({"messages": [("user", "q")]})
        assert out["messages"][-1].content == "the synthesis"
        handlers = [thread for thread in threading.enumerate() if thread.name == "pacore-handler"]
        for thread in handlers:  # the last call's thread may be in its last lines; a hung one would block 28 s more
            thread.join(timeout=1)
        assert not [thread for thread in handlers if thread.is_alive()]
        # the server notices a closed connection on its next poll (20 ms); both hung requests closed (30 s otherwise)
        wait_until(lambda: server.disconnected >= 2, 2, what=lambda: f"{server.disconnected} of 2 closed")
        assert server.disconnected == 2
    assert len(server.requests) == 4 + 2 + 1
