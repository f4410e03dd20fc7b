"""Context budget: before a synthesis call the prompt is measured, and references that would overflow the
model's context are capped (pacore_graph/synthesis/context_window.py policy) instead of failing the round.

Checked three ways: the policy itself, the emulator (whose HTTP 400 is vLLM's), and the real embedded
model (llama.cpp, n_ctx 8192, its own tokenizer).
"""

from __future__ import annotations

import random

import pytest

from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, RoundFailedError
from pacore_graph.extend import ChatExplorer, RetryPolicy, Trajectory
from pacore_graph.graph.runner import PaCoReRunner, to_messages
from pacore_graph.models.openai_compatible import OpenAICompatibleChatModel
from pacore_graph.synthesis.context_window import MIN_SHARE, fit_references
from pacore_graph.synthesis.prompt import render_synthesis_prompt
from pacore_graph.synthesis.tokens import count_tokens

NO_RETRY = RetryPolicy(max_attempts=1)


def _prompt_tokens(problem: str, references: list[str], config: PaCoReConfig) -> int:
    return count_tokens(render_synthesis_prompt(problem, references, config.template))[0]


def test_references_that_fit_are_left_alone():
    config = PaCoReConfig(rounds=[4], max_tokens=100, context_window=4096)
    references = ["answer 1", "answer 2 is longer", "3"]
    assert fit_references(references, to_messages("problem"), config) == references


def test_without_a_window_nothing_is_measured_or_cut():
    references = ["word " * 5000] * 4
    assert fit_references(references, to_messages("p"), PaCoReConfig(rounds=[4])) == references


def test_capped_references_fit_the_budget():
    config = PaCoReConfig(rounds=[8], max_tokens=128, context_window=1024)
    references = [("Checked. Verified. " * 58) + f"The answer is \\boxed{{{i}}}." for i in range(8)]
    fitted = fit_references(references, to_messages("problem one"), config)
    assert 1 <= len(fitted) < len(references)
    assert _prompt_tokens("problem one", fitted, config) <= 1024 - 128


def test_when_shares_get_too_small_the_longest_references_go_first():
    config = PaCoReConfig(rounds=[6], max_tokens=256, context_window=2048)
    references = [f"ref {i} " + "x " * (400 + 100 * i) for i in range(6)]
    fitted = fit_references(references, to_messages("problem"), config)
    assert len(fitted) * MIN_SHARE <= 2048 - 256
    kept = [reference.split(" ", 2)[1] for reference in fitted]
    assert kept == sorted(kept)[: len(kept)] and "0" in kept  # shortest kept, longest dropped, order kept


LONG_CONCLUSIONS = EmulatorConfig(
    ttft=0.01, token_delay=0.0002, output_tokens=120, answer_tokens=120, max_model_len=1024
)


async def _run_on_emulator(config: PaCoReConfig):
    with Emulator(LONG_CONCLUSIONS) as emu:
        model = OpenAICompatibleChatModel(base_url=emu.base_url, model=emu.config.model)
        try:
            return await PaCoReRunner(model, config).arun("problem one"), emu.stats()
        finally:
            await model.aclose()


async def test_overflowing_synthesis_without_a_window_fails_with_a_clear_message():
    config = PaCoReConfig(rounds=[8], max_tokens=128, retry=NO_RETRY)
    with pytest.raises(RoundFailedError) as caught:
        await _run_on_emulator(config)
    message = str(caught.value)
    assert "HTTP 400" in message and "does not fit the model's context" in message
    assert "round 2" in message


async def test_overflowing_synthesis_is_capped_to_the_window_on_the_emulator():
    config = PaCoReConfig(rounds=[8], max_tokens=128, context_window=1024, retry=NO_RETRY)
    result, stats = await _run_on_emulator(config)
    assert result.answer.strip() and not result.failures
    assert stats["errors"] == {}  # no HTTP 400: the capped prompt fitted
    final = result.rounds[-1].trajectories[0]
    assert final.prompt_tokens + 128 <= 1024


async def test_a_context_the_server_reported_fits_the_synthesis_as_a_configured_window_does():
    """No context_window in the config: the client carries the server's context (as ``chat_model`` sets it for a
    llama.cpp server, the embedded model's included) and the run fits its synthesis prompt to it."""
    config = PaCoReConfig(rounds=[8], max_tokens=128, retry=NO_RETRY)
    with Emulator(LONG_CONCLUSIONS) as emu:
        model = OpenAICompatibleChatModel(
            base_url=emu.base_url, model=emu.config.model, profile={"max_input_tokens": 1024}
        )
        try:
            result = await PaCoReRunner(model.bind(top_p=0.9), config).arun("problem one")  # found inside a binding
        finally:
            await model.aclose()
        assert emu.stats()["errors"] == {}
    assert result.answer.strip() and not result.failures
    assert result.rounds[-1].trajectories[0].prompt_tokens + 128 <= 1024


WORDS = "the answer follows from counting pairs of integers whose sum is fixed then checking small cases".split()


class LongFirstRound:
    """Round 1: long synthetic conclusions (no model call, so the test stays short); later rounds: the
    real embedded model, which receives a synthesis prompt built from them."""

    def __init__(self, chat: ChatExplorer):
        self.chat = chat

    async def explore(self, messages, episode):
        round_index, index = episode.round_index, episode.index
        if round_index == 0:
            rng = random.Random(index)
            text = " ".join(rng.choice(WORDS) for _ in range(2500)) + f" So the answer is {index}."
            return Trajectory(content=text, completion_tokens=2500)
        return await self.chat.explore(messages, episode)


@pytest.mark.embedded
async def test_embedded_model_synthesis_overflowing_its_context_is_capped(embedded_server):
    """Four 2500-word references overflow n_ctx 8192 (llama.cpp answers HTTP 400); with a context
    window set the references are capped and the synthesis succeeds. A 2048-token window is used so
    the capped prompt stays small on 2 CPU cores; the server's own token count must fit it."""
    model = OpenAICompatibleChatModel(base_url=embedded_server.base_url, model=embedded_server.model)
    try:
        overflow = PaCoReConfig(rounds=[4], max_tokens=16, retry=NO_RETRY)
        with pytest.raises(RoundFailedError, match="does not fit the model's context"):
            await PaCoReRunner(LongFirstRound(ChatExplorer(model, overflow)), overflow).arun("What is 2+3?")

        capped = PaCoReConfig(rounds=[4], max_tokens=16, context_window=2048, retry=NO_RETRY)
        result = await PaCoReRunner(LongFirstRound(ChatExplorer(model, capped)), capped).arun("What is 2+3?")
    finally:
        await model.aclose()
    final = result.rounds[-1].trajectories[0]
    assert not result.failures and final.completion_tokens > 0
    assert 0 < final.prompt_tokens <= 2048 - 16  # measured by llama.cpp's tokenizer, not ours
    uncapped = sum(count_tokens(reference)[0] for reference in result.rounds[0].references)
    assert uncapped > 2 * 2048  # the references alone were far over the window: capping was needed
