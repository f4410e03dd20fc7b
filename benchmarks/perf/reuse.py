"""``pacore bench reuse``: what escalating costs when a run continues from the earlier one (``asolve(...,
reuse=earlier)``): ``earlier`` then ``later`` on the same problems, against ``later`` alone, on the serving emulator.

Two arms, each against the freshly reset emulator (so both draw the same replies: the emulator's reply is a function
of the prompt and of how many times it has seen it):

- **later alone**: every problem at the later schedule (medium ``[16]``), nothing reused.
- **escalation**: every problem at the earlier schedule (low ``[4]``), then at the later one, each continuing from
  its earlier result: the later run's first round takes the earlier 4 trajectories and sends 12, then its synthesis.

Per arm and per part: the requests, completion and prompt tokens the emulator counted, and the wall time. The target:
the escalation costs no more than the later schedule alone plus the earlier run's final synthesis (the one call of
the earlier run that the later run cannot use, when only the first round grows). Beside it, what escalating would
cost without reuse: the earlier schedule, then the later one from scratch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.coordination import bench_emulator
from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, PaCoReResult, asolve
from pacore_graph.models import OpenAICompatibleChatModel


def reuse_emulator() -> EmulatorConfig:
    """The coordination benchmark's replies (400 to 4000 reasoning tokens, short conclusions), twice as fast."""
    return bench_emulator().model_copy(update={"token_delay": 0.0005})


class ReuseSettings(BenchSettings):
    problems: int = Field(20, ge=1)
    earlier: list[int] = Field(default_factory=lambda: [4], description="the schedule first run (low)")
    later: list[int] = Field(default_factory=lambda: [16], description="the schedule escalated to (medium)")
    concurrency: int = Field(8, ge=1, description="problems in flight")
    emulator: EmulatorConfig = Field(default_factory=reuse_emulator)

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """8 problems: well under a minute."""
        return {"problems": 8}


class Part(BaseModel):
    """One pass over the problems at one schedule, as the emulator counted it."""

    rounds: list[int]
    requests: int
    completion_tokens: int
    prompt_tokens: int
    wall_s: float
    reused: int = Field(0, description="trajectories taken from the earlier results instead of sent")
    final_tokens: int = Field(0, description="completion tokens of the final syntheses (client's account)")


class ReuseBenchReport(BaseModel):
    settings: dict[str, Any]
    later_alone: Part
    earlier: Part
    continued: Part

    @property
    def escalation_tokens(self) -> int:
        return self.earlier.completion_tokens + self.continued.completion_tokens

    @property
    def target_tokens(self) -> int:
        """The later schedule alone plus the earlier run's syntheses: what escalating may cost at most."""
        return self.later_alone.completion_tokens + self.earlier.final_tokens

    @property
    def paying_twice_tokens(self) -> int:
        """What escalating costs without reuse: the earlier schedule, then the later one from scratch."""
        return self.earlier.completion_tokens + self.later_alone.completion_tokens

    def summary(self) -> dict[str, Any]:
        """The JSON summary's figures: the ratio to the target (at most 1 meets it), and each part."""
        return {
            "escalation_over_target": round(self.escalation_tokens / self.target_tokens, 4),
            "escalation_over_paying_twice": round(self.escalation_tokens / self.paying_twice_tokens, 4),
            "continued_over_later_alone": round(
                self.continued.completion_tokens / self.later_alone.completion_tokens, 4
            ),
            "escalation_tokens": self.escalation_tokens,
            "target_tokens": self.target_tokens,
            "paying_twice_tokens": self.paying_twice_tokens,
            "later_alone": self.later_alone.model_dump(),
            "earlier": self.earlier.model_dump(),
            "continued": self.continued.model_dump(),
            "settings": self.settings,
        }


def problems(settings: ReuseSettings) -> list[str]:
    return [
        f"Problem {n}: how many ordered pairs (a, b) of positive integers satisfy a * b = {n + 12}?"
        for n in range(settings.problems)
    ]


async def run_part(
    emulator: Emulator,
    settings: ReuseSettings,
    rounds: list[int],
    earlier: list[PaCoReResult] | None = None,
) -> tuple[Part, list[PaCoReResult]]:
    """Every problem at ``rounds`` (continuing from ``earlier``, one result per problem), counted from zero."""
    before = await asyncio.to_thread(emulator.stats)
    model = OpenAICompatibleChatModel(base_url=emulator.base_url, model=emulator.config.model)
    config = PaCoReConfig(rounds=rounds)
    slots = asyncio.Semaphore(settings.concurrency)

    async def one(position: int, text: str) -> PaCoReResult:
        async with slots:
            return await asolve(model, text, config, reuse=earlier[position] if earlier else None)

    started = time.monotonic()
    try:
        results = await asyncio.gather(*(one(n, text) for n, text in enumerate(problems(settings))))
    finally:
        await model.aclose()
    wall = time.monotonic() - started
    after = await asyncio.to_thread(emulator.stats)
    part = Part(
        rounds=rounds,
        requests=after["requests"] - before["requests"],
        completion_tokens=after["completion_tokens"] - before["completion_tokens"],
        prompt_tokens=after["prompt_tokens"] - before["prompt_tokens"],
        wall_s=round(wall, 2),
        reused=sum(1 for r in results for rnd in r.rounds for t in rnd.trajectories if t.reused),
        final_tokens=sum(r.rounds[-1].completion_tokens for r in results),
    )
    return part, results


async def run_benchmark(
    settings: ReuseSettings, on_part: Callable[[str, Part], None] | None = None
) -> ReuseBenchReport:
    """Both arms on one emulator, each from a reset (see the module's docstring)."""
    with Emulator(settings.emulator) as emulator:
        await asyncio.to_thread(emulator.reset)
        alone, _ = await run_part(emulator, settings, settings.later)
        if on_part:
            on_part("later alone", alone)
        await asyncio.to_thread(emulator.reset)
        first, results = await run_part(emulator, settings, settings.earlier)
        if on_part:
            on_part("earlier", first)
        continued, _ = await run_part(emulator, settings, settings.later, results)
        if on_part:
            on_part("continued", continued)
    described = settings.model_dump(mode="json", exclude={"emulator"})
    described["emulator"] = settings.emulator.model_dump(
        mode="json", include={"seed", "ttft", "token_delay", "output_tokens", "answer_tokens"}
    )
    return ReuseBenchReport(settings=described, later_alone=alone, earlier=first, continued=continued)
