"""What the emulator says: a deterministic reply for each request, and its bytes on the wire.

A reply is a function of (emulator seed, the request's messages, how many times that exact request was
seen before). Identical requests (PaCoRe's K parallel trajectories) therefore get different replies, the
set of replies is repeatable, and a retry is a fresh draw (a fault does not repeat forever).

Every reply ends with a conclusion holding ``\\boxed{N}``: N is drawn from the problem's own answer
distribution (:class:`~pacore_emulator.config.AnswerMix`: easy, split or hard), and a
synthesis prompt (the Table-6 template) answers with the majority of its references, so a benchmark on
the emulator sees PaCoRe-like behaviour (synthesis beats a single sample).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pacore_emulator.config import EmulatorConfig

ANSWER_RANGE = 1000
VOCAB = (
    "let consider the sum over all cases so we get that each term is bounded and hence since "
    "therefore check again which gives a factor of two then substitute back into equation wait "
    "maybe simpler approach count pairs modulo prime verify small values"
).split()
CLOSING = [" Checked.", " Verified."]  # filler before the final sentence when answer_tokens is large
_ORIGINAL = re.compile(r"Original Problem:\n(.*?)\n\nReference Responses:", re.S)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_REFERENCE_SPLIT = re.compile(r"\nReference \d+:\n")
# The note a deduplicated reference carries (pacore_graph.coordination.references.DUPLICATES_NOTE; a test
# keeps the two in step): it stands for that many references.
_DUPLICATES = re.compile(r"\n\n\[(\d+) references gave this same response\.\]\s*$")


def message_text(content: Any) -> str:
    """Text of a message content, which OpenAI allows to be a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """About four characters per token plus a few per message, as chat templates add."""
    return sum(len(message_text(m.get("content"))) // 4 + 4 for m in messages) + 2


def _digest(*parts: Any) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(str(part).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.digest()


def _unit(digest: bytes) -> float:
    return int.from_bytes(digest[:7], "big") / float(1 << 56)


def request_key(messages: list[dict[str, Any]]) -> str:
    """Identity of a request's prompt, for counting repeats."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def problem_answers(seed: int, problem: str, count: int) -> list[int]:
    """The problem's first ``count`` answers: distinct, fixed by the seed and the problem's text."""
    answers = [int.from_bytes(_digest("answer", seed, problem)[:4], "big") % ANSWER_RANGE]
    salt = 0
    while len(answers) < count:
        salt += 1
        answer = int.from_bytes(_digest("answer", seed, problem, salt)[:4], "big") % ANSWER_RANGE
        if answer not in answers:
            answers.append(answer)
    return answers


def problem_kind(config: EmulatorConfig, problem: str) -> str:
    """Easy, split, hard, ...: the problem's kind in ``config.answers``, fixed by the seed and the text."""
    return config.answers.pick(_unit(_digest("kind", config.seed, problem)))


def majority_answer(config: EmulatorConfig, problem: str) -> int:
    """The answer most trajectories of ``problem`` (the text of its user message) reach."""
    return problem_answers(config.seed, problem, 1)[0]


def draw_answer(config: EmulatorConfig, problem: str, rng: random.Random) -> int:
    """One trajectory's answer: the problem's k-th answer with the k-th share of its kind, else noise."""
    shares = config.answers.kinds[problem_kind(config, problem)]
    u = rng.random()
    edge = 0.0
    for answer, share in zip(problem_answers(config.seed, problem, len(shares)), shares, strict=True):
        edge += share
        if u < edge:
            return answer
    return rng.randrange(ANSWER_RANGE)


def synthesis_answer(text: str) -> int | None:
    """Majority of the ``\\boxed{}`` answers in a synthesis prompt's references (ties: smallest); a
    deduplicated reference counts as many times as its note says."""
    match = _ORIGINAL.search(text)
    if not match:
        return None
    votes: Counter[int] = Counter()
    for reference in _REFERENCE_SPLIT.split(text[match.end():])[1:]:
        found = _BOXED.findall(reference)
        if found and found[-1].strip().lstrip("-").isdigit():
            duplicates = _DUPLICATES.search(reference)
            votes[int(found[-1])] += int(duplicates.group(1)) if duplicates else 1
    if not votes:
        return None
    best = max(votes.values())
    return min(answer for answer, count in votes.items() if count == best)


@dataclass
class ReplyPlan:
    """One request's fate: its fault (if any), its tokens in order, and how it finished."""

    fault: str | None
    pieces: list[tuple[str, str]]  # (channel, text); channel is "reasoning" or "content"
    prompt_tokens: int
    finish_reason: str
    answer: int
    cut_fraction: float
    created: int = field(default_factory=lambda: int(time.time()))
    request_id: str = ""
    cached_tokens: int | None = None  # prompt tokens found in the prefix cache; None: the emulator keeps none

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces)


def plan_reply(config: EmulatorConfig, body: dict[str, Any], occurrence: int) -> ReplyPlan:
    """Decide everything about one request's reply up front (cheap; no I/O)."""
    messages = body.get("messages") or []
    key = request_key(messages)
    salt = (config.seed, config.replica) if config.replica else (config.seed,)  # replica 0: replies as ever
    digest = _digest(*salt, key, occurrence)
    rng = random.Random(digest)
    fault = config.faults.pick(_unit(_digest("fault", digest)))

    last_user = next((message_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    original = _ORIGINAL.search(last_user)
    problem = original.group(1) if original else last_user
    answer = synthesis_answer(last_user)
    if answer is None:
        answer = draw_answer(config, problem, rng)

    length = rng.randint(*config.output_tokens) if isinstance(config.output_tokens, tuple) else config.output_tokens
    if config.answers.minority_length != 1.0 and answer != majority_answer(config, problem):
        length = round(length * config.answers.minority_length)
    conclusion = rng.randint(*config.answer_tokens) if isinstance(config.answer_tokens, tuple) else config.answer_tokens
    pieces = _pieces(config.reasoning, rng, length, conclusion, answer)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    finish = "stop"
    if isinstance(limit, int) and 0 < limit < len(pieces):
        pieces = pieces[:limit]
        finish = "length"
    return ReplyPlan(
        fault=fault,
        pieces=pieces,
        prompt_tokens=estimate_prompt_tokens(messages),
        finish_reason=finish,
        answer=answer,
        cut_fraction=rng.uniform(0.1, 0.9),
        request_id="chatcmpl-" + digest[:12].hex(),
    )


def _pieces(
    style: str, rng: random.Random, length: int, conclusion_tokens: int, answer: int
) -> list[tuple[str, str]]:
    conclusion_words = [" The", " answer", " is", f" \\boxed{{{answer}}}."]
    n_answer = min(length, max(conclusion_tokens, len(conclusion_words)))
    fillers = n_answer - len(conclusion_words)
    conclusion = [CLOSING[i % len(CLOSING)] for i in range(max(fillers, 0))] + conclusion_words
    conclusion = conclusion[len(conclusion) - n_answer:]
    conclusion[0] = conclusion[0].lstrip()
    if style == "think":
        n_reason = max(length - n_answer - 2, 0)
        words = [" " + w for w in rng.choices(VOCAB, k=n_reason)]
        head = [("content", "<think>\n")] + [("content", w) for w in words] + [("content", "\n</think>\n\n")]
        pieces = head + [("content", w) for w in conclusion]
        return pieces[:length] if length >= len(conclusion) + 2 else [("content", w) for w in conclusion]
    n_reason = length - n_answer
    words = [" " + w for w in rng.choices(VOCAB, k=n_reason)]
    channel = "content" if style == "none" else "reasoning"
    if style == "none" and words:
        conclusion[0] = "\n\n" + conclusion[0]
    return [(channel, w) for w in words] + [("content", w) for w in conclusion]


# ----------------------------------------------------------------------------------------- wire format


def _reasoning_fields(style: str, text: str | None) -> dict[str, str | None]:
    if style == "reasoning":
        return {"reasoning": text}
    if style == "reasoning_content":
        return {"reasoning_content": text}
    if style == "both":
        return {"reasoning": text, "reasoning_content": text}
    return {}


def usage_dict(plan: ReplyPlan) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
    }
    if plan.cached_tokens is not None:  # as vLLM reports prefix-cache hits
        usage["prompt_tokens_details"] = {"cached_tokens": plan.cached_tokens}
    return usage


def completion_body(config: EmulatorConfig, plan: ReplyPlan) -> bytes:
    """The JSON body of a non-streamed chat completion, shaped like vLLM's."""
    content = "".join(text for channel, text in plan.pieces if channel == "content")
    reasoning = "".join(text for channel, text in plan.pieces if channel == "reasoning")
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    message.update(_reasoning_fields(config.reasoning, reasoning or None))
    message["tool_calls"] = []
    body: dict[str, Any] = {
        "id": plan.request_id,
        "object": "chat.completion",
        "created": plan.created,
        "model": config.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish_reason}],
    }
    if config.usage:
        body["usage"] = usage_dict(plan)
    return json.dumps(body, ensure_ascii=False).encode()


@lru_cache(maxsize=8192)
def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def stream_events(config: EmulatorConfig, plan: ReplyPlan, include_usage: bool) -> tuple[bytes, list[int], bytes]:
    """SSE bytes of a streamed reply: (token events, offset after each event, tail).

    Event 0 is the role chunk, event i the i-th token; the tail holds the finish chunk, the usage chunk
    when asked and ``data: [DONE]``. Offsets let the server write whatever is due as one slice.
    """
    envelope = (
        '{"id":"' + plan.request_id + '","object":"chat.completion.chunk","created":' + str(plan.created)
        + ',"model":' + json.dumps(config.model)
    )
    head = envelope + ',"choices":[{"index":0,"delta":'
    tail_open = ',"logprobs":null,"finish_reason":null}]}'
    reasoning_keys = list(_reasoning_fields(config.reasoning, "").keys())
    parts = ["data: " + head + '{"role":"assistant","content":""}' + tail_open + "\n\n"]
    for channel, text in plan.pieces:
        encoded = _json_string(text)
        if channel == "content":
            delta = '{"content":' + encoded + "}"
        else:
            delta = "{" + ",".join(f'"{k}":{encoded}' for k in reasoning_keys) + "}"
        parts.append("data: " + head + delta + tail_open + "\n\n")
    encoded_parts = [p.encode() for p in parts]
    offsets = []
    total = 0
    for p in encoded_parts:
        total += len(p)
        offsets.append(total)
    finish = (
        "data: " + head + '{},"logprobs":null,"finish_reason":' + json.dumps(plan.finish_reason) + "}]}\n\n"
    )
    tail = finish
    if include_usage and config.usage:
        usage = json.dumps(usage_dict(plan))
        tail += "data: " + envelope + ',"choices":[],"usage":' + usage + "}\n\n"
    tail += "data: [DONE]\n\n"
    return b"".join(encoded_parts), offsets, tail.encode()


def error_body(status: int, message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()
