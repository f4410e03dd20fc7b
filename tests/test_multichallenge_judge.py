"""MultiChallenge judge: lenient parsing, retries of unreadable replies, structured-output fallback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from pacore_benchmarks.multichallenge.judge import (
    STRUCTURED_FORMATS,
    Judge,
    UnreadableVerdict,
    judge_messages,
    parse_judge_reply,
)
from pacore_graph import ModelRequestError


class JudgeFake(BaseChatModel):
    """A judge whose reply is a function of the prompt and the call parameters; records both."""

    reply: Callable[[list[BaseMessage], dict[str, Any]], str]
    calls: list[tuple[list[BaseMessage], dict[str, Any]]] = []

    @property
    def _llm_type(self) -> str:
        return "judge-fake"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.calls.append((list(messages), dict(kwargs)))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply(messages, kwargs)))])


@pytest.mark.parametrize(
    "text, verdict",
    [
        ('{"reasoning": "It lists 3 items.", "verdict": "YES"}', "YES"),
        ('{"reasoning": "r", "verdict": "no"}', "NO"),
        ('{"Reasoning": "r", "Verdict": "Yes."}', "YES"),
        ('Sure!\n```json\n{"reasoning": "fine", "verdict": "NO"}\n```', "NO"),
        ('{"reasoning": "r", "answer": true}', "YES"),
        ('<think>maybe yes, maybe no</think>{"reasoning": "r", "verdict": "NO"}', "NO"),
        ("Verdict: **YES**", "YES"),
        ("The reply ignores the constraint.\nFinal verdict - no", "NO"),
        ("YES", "YES"),
        ("  no.  ", "NO"),
        ("**No**", "NO"),
        ("No. The reply drops the earlier constraint.", "NO"),
        ("Yes, the response mentions the allergy.", "YES"),
        ('{"reasoning": "r", "verdict": "YES"', "YES"),  # unclosed JSON: the labelled verdict is still there
    ],
)
def test_verdict_variants_are_read(text, verdict):
    assert parse_judge_reply(text).verdict == verdict


def test_json_reasoning_is_kept():
    reply = parse_judge_reply('{"reasoning": "It keeps the 3-sentence limit.", "verdict": "YES"}')
    assert reply.reasoning == "It keeps the 3-sentence limit."


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty"),
        ("I am not sure what to say about this.", "no YES/NO"),
        ("No idea", "no YES/NO"),
        ("no way to tell from this reply", "no YES/NO"),
        ('{"reasoning": "looks good"}', "no YES/NO"),  # missing verdict
        ('{"reasoning": "r", "verdict": "maybe"}', "no YES/NO"),
        ("Yes and no: it depends.", "both"),
        ("Verdict: YES. Verdict: NO.", "both"),
        ("<think>the answer is yes</think>", "empty"),
    ],
)
def test_garbage_and_missing_verdicts_are_refused(text, problem):
    with pytest.raises(UnreadableVerdict, match=problem):
        parse_judge_reply(text)


def test_prompt_shows_only_response_and_target_question():
    messages = judge_messages("RESPONSE-TEXT", "Does it mention X?")
    assert isinstance(messages[0], SystemMessage) and isinstance(messages[1], HumanMessage)
    assert "RESPONSE-TEXT" in messages[1].content and "Does it mention X?" in messages[1].content
    assert "verdict" in messages[0].content


async def test_judge_calls_at_temperature_zero_with_a_schema():
    fake = JudgeFake(reply=lambda m, kw: '{"reasoning": "ok", "verdict": "YES"}')
    outcome = await Judge(fake, max_tokens=64).ajudge("resp", "question?")
    assert outcome.verdict == "YES" and outcome.error is None and outcome.attempts == 1
    ((_, kwargs),) = fake.calls
    assert kwargs["temperature"] == 0 and kwargs["max_tokens"] == 64
    assert kwargs["response_format"] == STRUCTURED_FORMATS[0]


async def test_unreadable_reply_is_retried_with_a_note_then_read():
    def reply(messages, kwargs):
        # First prompt: garbage. The retry carries a note, so the (deterministic) judge answers.
        return "hmm" if len(messages) == 2 else '{"reasoning": "fixed", "verdict": "NO"}'

    fake = JudgeFake(reply=reply)
    outcome = await Judge(fake).ajudge("resp", "q?")
    assert outcome.verdict == "NO" and outcome.attempts == 2
    retry_prompt = fake.calls[1][0]
    assert retry_prompt[-2].content == "hmm" and "could not be read" in retry_prompt[-1].content


async def test_always_unreadable_reply_is_a_judge_error_never_a_pass():
    fake = JudgeFake(reply=lambda m, kw: "I cannot decide.")
    outcome = await Judge(fake, attempts=3).ajudge("resp", "q?")
    assert outcome.verdict is None
    assert outcome.error and "after 3 attempts" in outcome.error
    assert outcome.raw == "I cannot decide." and len(fake.calls) == 3


async def test_structured_output_falls_back_when_the_server_refuses_the_format():
    def reply(messages, kwargs):
        fmt = kwargs.get("response_format")
        if fmt is not None and fmt["type"] == "json_schema":
            # what llama-cpp-python's server answers to an OpenAI json_schema request
            raise ModelRequestError("HTTP 500: 'response_format', 'type': Input should be 'text' or 'json_object'")
        return '{"reasoning": "r", "verdict": "YES"}'

    fake = JudgeFake(reply=reply)
    judge = Judge(fake)
    assert (await judge.ajudge("a", "q?")).verdict == "YES"
    assert (await judge.ajudge("b", "q?")).verdict == "YES"
    formats = [kw.get("response_format") for _, kw in fake.calls]
    assert formats == [STRUCTURED_FORMATS[0], STRUCTURED_FORMATS[1], STRUCTURED_FORMATS[1]]


async def test_other_call_failures_propagate():
    def reply(messages, kwargs):
        raise ModelRequestError("HTTP 503 from server", status=503, retryable=True)

    with pytest.raises(ModelRequestError):
        await Judge(JudgeFake(reply=reply)).ajudge("a", "q?")
