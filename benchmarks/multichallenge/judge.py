"""The MultiChallenge judge: a YES/NO question about the final response, answered by an LLM.

By default the request is the official one (ekwinox117/multi-challenge at 5ccefcc, ``src/evaluator.py``
and ``src/models/openai.py``): one user message, ``JUDGE_PROMPT`` formatted with the final response and
the TARGET_QUESTION, temperature 0, and the structured output ``{reasoning, verdict}`` that the openai
SDK's ``beta.chat.completions.parse(response_format=JudgeResponse)`` sends. The official evaluator asks
for ``max_tokens=4096``, but its OpenAIModel takes no such argument, so no limit is sent. The project's
own prompt (a system message, ``<reply>``, a JSON answer) stays available as ``prompt="project"``.

Either way the judge sees only the final response and the TARGET_QUESTION, never the conversation. Its
reply is parsed leniently, because small or unconstrained judges wrap, bold, or abbreviate their
verdicts. A reply that cannot be read is asked again (the official prompt unchanged; the project's with a
note saying why), and then counted as a judge error, never as a pass. A server that refuses the
structured output is asked with the next format of ``formats``; the format used is recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel

Verdict = Literal["YES", "NO"]
JudgePrompt = Literal["official", "project"]

OFFICIAL_JUDGE_MODEL = "gpt-4o-2024-08-06"
# Byte for byte the official JUDGE_PROMPT; formatted positionally with (response, target_question).
OFFICIAL_JUDGE_PROMPT = """You are tasked with evaluating a model response to see if it meets a specific criteria.
The criteria will always be YES/NO evaluation.

The model response is as follows:
<MODEL_RESPONSE>
{}
</MODEL_RESPONSE>

The criteria that the model response must meet is as follows. Be VERY STRICT!:
<CRITERIA>
{}
</CRITERIA>

Print your reasoning followed by your verdict, either "YES" or "NO"."""

# What the openai SDK sends for the official pydantic model JudgeResponse(reasoning: str, verdict: YES|NO).
OFFICIAL_RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "schema": {
            "properties": {
                "reasoning": {"title": "Reasoning", "type": "string"},
                "verdict": {"enum": ["YES", "NO"], "title": "Verdict", "type": "string"},
            },
            "required": ["reasoning", "verdict"],
            "title": "JudgeResponse",
            "type": "object",
            "additionalProperties": False,
        },
        "name": "JudgeResponse",
        "strict": True,
    },
}

# The official client (openai SDK ``parse``) also sends this; give it to the judge's chat model.
OFFICIAL_EXTRA_BODY: dict[str, Any] = {"stream": False}

JUDGE_SYSTEM = (
    "You grade one reply written by an AI assistant at the end of a conversation. You are shown that "
    "final reply and a yes/no question about it. Judge only what the reply itself says; do not reward "
    'what it might have meant. Answer with a JSON object with exactly two keys: "reasoning" (at most '
    'three sentences explaining your decision) and "verdict" (the string "YES" or "NO"). Write '
    "nothing outside the JSON object."
)

JUDGE_USER = (
    "Final reply of the assistant:\n<reply>\n{response}\n</reply>\n\n"
    "Question about this reply: {question}\n\n"
    'Answer as JSON: {{"reasoning": "...", "verdict": "YES" or "NO"}}'
)

RETRY_NOTE = (
    "Your answer could not be read ({problem}). Answer again with only the JSON object "
    '{{"reasoning": "...", "verdict": "YES" or "NO"}}.'
)

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "verdict": {"type": "string", "enum": ["YES", "NO"]},
    },
    "required": ["reasoning", "verdict"],
    "additionalProperties": False,
}

# Ways to ask for structured output, tried in order until the server accepts one: OpenAI / vLLM's JSON
# schema, llama.cpp's schema-constrained JSON object, then the prompt alone.
STRUCTURED_FORMATS: tuple[dict[str, Any] | None, ...] = (
    {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True}},
    {"type": "json_object", "schema": VERDICT_SCHEMA},
    None,
)
OFFICIAL_FORMATS: tuple[dict[str, Any] | None, ...] = (OFFICIAL_RESPONSE_FORMAT, *STRUCTURED_FORMATS[1:])


class JudgeReply(BaseModel):
    """What one judge reply says, once read."""

    verdict: Verdict
    reasoning: str


class JudgeOutcome(BaseModel):
    """The judge's final word on one response; ``verdict`` is None exactly when ``error`` is set."""

    verdict: Verdict | None = None
    reasoning: str = ""
    error: str | None = None
    attempts: int = 0
    raw: str = ""
    response_format: str = "none"  # the structured output the server accepted: json_schema, json_object, none


class UnreadableVerdict(ValueError):
    """The judge reply holds no single YES/NO verdict."""


# ---------------------------------------------------------------- parsing

_VERDICT_KEYS = ("verdict", "answer", "judgement", "judgment", "decision", "result")
_REASON_KEYS = ("reasoning", "reason", "explanation", "rationale", "analysis")
_WORD = {"yes": "YES", "no": "NO", "true": "YES", "false": "NO"}
_LABELLED = re.compile(r"(?:verdict|answer|judge?ment|decision|result)\W{0,6}(yes|no)\b", re.IGNORECASE)
_STANDALONE = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def _after_thinking(text: str) -> str:
    return text.rsplit("</think>", 1)[-1] if "</think>" in text else text


def _word_verdict(value: Any) -> Verdict | None:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if not isinstance(value, str):
        return None
    word = re.sub(r"[^a-z]", "", value.lower())
    return _WORD.get(word)  # type: ignore[return-value]


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object embedded in ``text`` (fenced or bare), outermost first."""
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _from_json(obj: dict[str, Any]) -> JudgeReply | None:
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    verdict = next((_word_verdict(lowered[k]) for k in _VERDICT_KEYS if k in lowered), None)
    if verdict is None:
        return None
    reasoning = next((str(lowered[k]) for k in _REASON_KEYS if k in lowered), "")
    return JudgeReply(verdict=verdict, reasoning=reasoning)


def parse_judge_reply(text: str) -> JudgeReply:
    """Read a verdict from a judge reply, or raise :class:`UnreadableVerdict` saying why.

    Accepted, in order: a JSON object with a verdict-like key; a labelled verdict ("Verdict: **NO**");
    a reply that is only "yes"/"no"; a reply that opens with a punctuated yes/no ("No. It ...") and
    never says the other.
    """
    body = _after_thinking(text or "").strip()
    if not body:
        raise UnreadableVerdict("empty reply")
    for obj in _json_objects(body):
        reply = _from_json(obj)
        if reply is not None:
            return reply
    labelled = _LABELLED.findall(body)
    if labelled:
        verdicts = {w.upper() for w in labelled}
        if len(verdicts) == 1:
            return JudgeReply(verdict=verdicts.pop(), reasoning=body)
        raise UnreadableVerdict("reply gives both YES and NO as its verdict")
    bare = _word_verdict(body)
    if bare is not None:
        return JudgeReply(verdict=bare, reasoning="")
    words = {w.upper() for w in _STANDALONE.findall(body)}
    # "Yes, it does ..." / "No. It ..." but not "No idea": the word must stand alone, punctuated.
    first = re.match(r"[\W_]*(yes|no)\s*[,.;:!]", body, re.IGNORECASE)
    if first and len(words) == 1:
        return JudgeReply(verdict=first.group(1).upper(), reasoning=body)  # type: ignore[arg-type]
    if len(words) == 2:
        raise UnreadableVerdict("reply mentions both YES and NO without a labelled verdict")
    raise UnreadableVerdict("no YES/NO verdict found")


# ---------------------------------------------------------------- calling


def judge_messages(response: str, question: str, prompt: JudgePrompt = "official") -> list[BaseMessage]:
    """The judge's request: the official single user message, or the project's system + user pair."""
    if prompt == "official":
        return [HumanMessage(content=OFFICIAL_JUDGE_PROMPT.format(response, question))]
    return [
        SystemMessage(content=JUDGE_SYSTEM),
        HumanMessage(content=JUDGE_USER.format(response=response, question=question)),
    ]


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)


class Judge:
    """Asks ``model`` (temperature 0) whether a response meets its TARGET_QUESTION.

    Structured output is negotiated once per judge: a request refused because of its
    ``response_format`` is sent again with the next format of ``formats``, and the accepted one is
    kept. Other call failures propagate, so the runner decides whether they are worth a rerun.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        prompt: JudgePrompt = "official",
        attempts: int = 3,
        max_tokens: int | None = None,
        formats: tuple[dict[str, Any] | None, ...] | None = None,
    ):
        if attempts < 1:
            raise ValueError("judge attempts must be at least 1")
        if formats is not None and not formats:
            raise ValueError("judge formats must not be empty (use (None,) for the prompt alone)")
        self.params: dict[str, Any] = {"temperature": 0.0}  # the official client sends float(0)
        if max_tokens is not None:
            self.params["max_tokens"] = max_tokens
        self.model = model
        self.prompt = prompt
        self.formats = list(formats or (OFFICIAL_FORMATS if prompt == "official" else STRUCTURED_FORMATS))
        self.attempts = attempts

    @property
    def response_format(self) -> dict[str, Any] | None:
        return self.formats[0]

    async def _call(self, messages: list[BaseMessage]) -> str:
        while True:
            fmt = self.formats[0]
            params = self.params if fmt is None else {**self.params, "response_format": fmt}
            try:
                return _text(await self.model.ainvoke(messages, **params))
            except Exception as exc:
                if fmt is None or "response_format" not in str(exc) or len(self.formats) == 1:
                    raise
                if self.formats and self.formats[0] is fmt:  # another call may have moved on already
                    self.formats.pop(0)

    @property
    def format_name(self) -> str:
        return "none" if self.response_format is None else self.response_format["type"]

    async def ajudge(self, response: str, question: str) -> JudgeOutcome:
        messages = judge_messages(response, question, self.prompt)
        raw = ""
        problem = ""
        for attempt in range(1, self.attempts + 1):
            raw = await self._call(messages)
            try:
                verdict = parse_judge_reply(raw)
            except UnreadableVerdict as exc:
                problem = str(exc)
                if self.prompt == "project":
                    # The retry differs from the first prompt, so a deterministic judge can change its reply.
                    note = HumanMessage(content=RETRY_NOTE.format(problem=problem))
                    messages = [*messages, AIMessage(content=raw), note]
                continue
            return JudgeOutcome(
                verdict=verdict.verdict,
                reasoning=verdict.reasoning,
                attempts=attempt,
                raw=raw,
                response_format=self.format_name,
            )
        return JudgeOutcome(
            error=f"unreadable judge reply after {self.attempts} attempts: {problem}",
            attempts=self.attempts,
            raw=raw,
            response_format=self.format_name,
        )
