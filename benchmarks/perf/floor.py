"""The floor: PaCoRe's request pattern sent by the leanest client we can write, to measure the operator against.

One shared aiohttp session, one global semaphore, plain dicts and ``json``: no framework. It sends what
the operator sends (same bodies, same rounds: K1 requests with the problem's messages, then the Table-6
template over the previous conclusions in place of the last user message, then a final round of 1), so
any difference in wall time, CPU or memory is the operator's own cost.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import aiohttp
from pydantic import BaseModel

TEMPLATE_HEAD = (
    "You are given a problem and a list of reference responses. Your job is to analyze these references and "
    "provide your own response.\n\nOriginal Problem:\n"
)
TEMPLATE_TAIL = (
    "\n\nNow, based on the original problem and reference responses above, please provide your own "
    "comprehensive solution."
)
THINK_CLOSE = "</think>"


def render_synthesis(original: str, references: list[str]) -> str:
    """Paper Table 6, byte-identical to jinja2's default rendering, without jinja2."""
    parts = [TEMPLATE_HEAD, original, "\n\nReference Responses:\n"]
    for number, reference in enumerate(references, 1):
        parts.append(f"\nReference {number}:\n{reference}\n")
    parts.append(TEMPLATE_TAIL)
    return "".join(parts)


def conclusion_of(content: str | None) -> str:
    """The text after the last ``</think>`` (vLLM's reasoning fields are simply not read)."""
    content = content or ""
    if THINK_CLOSE in content:
        return content.rpartition(THINK_CLOSE)[2]
    if content.lstrip().startswith("<think>"):
        return ""
    return content


def with_synthesis(messages: list[dict[str, Any]], references: list[str]) -> list[dict[str, Any]]:
    """The messages with only the last user message's content replaced by the rendered template."""
    for position in range(len(messages) - 1, -1, -1):
        if messages[position].get("role") == "user":
            wrapped = {**messages[position], "content": render_synthesis(messages[position]["content"], references)}
            return [*messages[:position], wrapped, *messages[position + 1 :]]
    raise ValueError("a problem needs a user message")


class FloorResult(BaseModel):
    """What the floor did: counts only, the comparison is about cost."""

    problems: int
    trajectories: int
    failures: int
    completion_tokens: int
    answers: list[str]


class FloorClient:
    """Sends PaCoRe's requests for many problems at once over one session."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        concurrency: int = 1024,
        stream: bool = False,
        seed: int = 42,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.stream = stream
        self.seed = seed
        self.sampling = {"temperature": temperature, "top_p": top_p}
        self.semaphore = asyncio.Semaphore(concurrency)
        self.session: aiohttp.ClientSession | None = None
        self.trajectories = 0
        self.failures = 0
        self.completion_tokens = 0

    async def __aenter__(self) -> FloorClient:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=60)
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None), headers={"Content-Type": "application/json"}
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    async def call(self, messages: list[dict[str, Any]]) -> str | None:
        """One trajectory; its raw content, or None when it failed (failures are dropped, as in PaCoRe)."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.sampling}
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        assert self.session is not None
        self.trajectories += 1
        async with self.semaphore:
            try:
                async with self.session.post(self.url, data=json.dumps(body)) as response:
                    if response.status != 200:
                        await response.read()
                        self.failures += 1
                        return None
                    if self.stream:
                        return await self._read_stream(response)
                    data = json.loads(await response.read())
            except (TimeoutError, aiohttp.ClientError, ValueError):
                self.failures += 1
                return None
        usage = data.get("usage")
        if usage:
            self.completion_tokens += usage.get("completion_tokens") or 0
        return data["choices"][0]["message"].get("content") or ""

    async def _read_stream(self, response: aiohttp.ClientResponse) -> str | None:
        content: list[str] = []
        finished = False
        async for line in response.content:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                finished = True
                break
            piece = json.loads(data)
            usage = piece.get("usage")
            if usage:
                self.completion_tokens += usage.get("completion_tokens") or 0
            for choice in piece.get("choices") or ():
                text = choice["delta"].get("content")
                if text:
                    content.append(text)
        if not finished:
            self.failures += 1
            return None
        return "".join(content)

    async def solve(self, messages: list[dict[str, Any]], rounds: list[int]) -> str:
        """All rounds of one problem; returns the final conclusion ('' when every final call failed)."""
        current = messages
        conclusions: list[str] = []
        for k in [*rounds, 1]:
            outputs = await asyncio.gather(*(self.call(current) for _ in range(k)))
            order = sorted(range(k), key=lambda i: len(outputs[i] or ""))
            random.Random(self.seed).shuffle(order)
            found = (conclusion_of(outputs[i]) for i in order if outputs[i] is not None)
            conclusions = [text for text in found if text.strip()]  # unusable ones are dropped, as the operator does
            current = with_synthesis(messages, conclusions)
        return conclusions[0] if conclusions else ""


async def run_floor(
    base_url: str,
    model: str,
    problems: list[list[dict[str, Any]]],
    rounds: list[int],
    *,
    concurrency: int = 1024,
    stream: bool = False,
    seed: int = 42,
    on_answered: Callable[[], None] | None = None,
) -> FloorResult:
    """Solve every problem concurrently with the floor client; ``on_answered`` runs before the session closes."""
    async with FloorClient(base_url, model, concurrency=concurrency, stream=stream, seed=seed) as client:
        answers = await asyncio.gather(*(client.solve(problem, rounds) for problem in problems))
        if on_answered is not None:
            on_answered()
    return FloorResult(
        problems=len(problems),
        trajectories=client.trajectories,
        failures=client.failures,
        completion_tokens=client.completion_tokens,
        answers=list(answers),
    )
