"""MultiChallenge judge: the official request by default, lenient parsing, retries of unreadable replies,
structured-output fallback. (The official request at a mock server: test_multichallenge_official.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from pacore_benchmarks.multichallenge.judge import (
    OFFICIAL_JUDGE_PROMPT,
    OFFICIAL_RESPONSE_FORMAT,
    STRUCTURED_FORMATS,
    Judge,
    UnreadableVerdict,
    judge_messages,
    parse_judge_reply,
)
from pacore_graph.extend import ModelRequestError


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
    (official,) = judge_messages("RESPONSE-TEXT", "Does it mention X?")
    assert isinstance(official, HumanMessage)
    assert official.content == OFFICIAL_JUDGE_PROMPT.format("RESPONSE-TEXT", "Does it mention X?")
    assert "<MODEL_RESPONSE>\nRESPONSE-TEXT\n</MODEL_RESPONSE>" in official.content
    assert "Be VERY STRICT!:\n<CRITERIA>\nDoes it mention X?\n</CRITERIA>" in official.content
    system, user = judge_messages("RESPONSE-TEXT", "Does it mention X?", prompt="project")
    assert isinstance(system, SystemMessage) and isinstance(user, HumanMessage)
    assert "RESPONSE-TEXT" in user.content and "Does it mention X?" in user.content
    assert "verdict" in system.content


async def test_judge_calls_at_temperature_zero_with_the_official_schema_and_no_token_cap():
    fake = JudgeFake(reply=lambda m, kw: '{"reasoning": "ok", "verdict": "YES"}')
    outcome = await Judge(fake).ajudge("resp", "question?")
    assert outcome.verdict == "YES" and outcome.error is None and outcome.attempts == 1
    assert outcome.response_format == "json_schema"
    ((messages, kwargs),) = fake.calls
    assert len(messages) == 1 and kwargs == {"temperature": 0.0, "response_format": OFFICIAL_RESPONSE_FORMAT}
    fake = JudgeFake(reply=lambda m, kw: '{"reasoning": "ok", "verdict": "NO"}')
    assert (await Judge(fake, prompt="project", max_tokens=64).ajudge("resp", "q?")).verdict == "NO"
    ((_, kwargs),) = fake.calls
    assert kwargs == {"temperature": 0.0, "max_tokens": 64, "response_format": STRUCTURED_FORMATS[0]}


async def test_unreadable_reply_is_asked_again_unchanged_with_the_official_prompt():
    replies = iter(["hmm", '{"reasoning": "fixed", "verdict": "NO"}'])
    fake = JudgeFake(reply=lambda m, kw: next(replies))
    outcome = await Judge(fake).ajudge("resp", "q?")
    assert outcome.verdict == "NO" and outcome.attempts == 2
    assert fake.calls[0] == fake.calls[1]  # the official request, both times


async def test_unreadable_reply_is_retried_with_a_note_then_read():
    def reply(messages, kwargs):
        # First prompt: garbage. The retry carries a note, so the (deterministic) judge answers.
        return "hmm" if len(messages) == 2 else '{"reasoning": "fixed", "verdict": "NO"}'

    fake = JudgeFake(reply=reply)
    outcome = await Judge(fake, prompt="project").ajudge("resp", "q?")
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
    outcome = await judge.ajudge("b", "q?")
    assert outcome.verdict == "YES" and outcome.response_format == "json_object"  # recorded in the row
    formats = [kw.get("response_format") for _, kw in fake.calls]
    assert formats == [OFFICIAL_RESPONSE_FORMAT, STRUCTURED_FORMATS[1], STRUCTURED_FORMATS[1]]


async def test_other_call_failures_propagate():
    def reply(messages, kwargs):
        raise ModelRequestError("HTTP 503 from server", status=503, retryable=True)

    with pytest.raises(ModelRequestError):
        await Judge(JudgeFake(reply=reply)).ajudge("a", "q?")
