"""``pacore bench panel``: what a panel costs per model, against each of its models alone on the same problems.

Two emulated servers stand for the two models: a small one (fast, short replies) and a strong one (slower, longer
replies). Three arms run the same problems under the same schedule, one after another, on the two servers reset
before each arm:

- **strong**: every slot and the synthesis on the strong model (what one model per run does today);
- **panel**: the round's slots shared by weight (small 3 : strong 1 by default), the synthesis by the strong model;
- **small**: every slot and the synthesis on the small model.

Per arm and model: the requests and completion tokens each server counted (its own count), the trajectories and
seconds the client's per-model account gives (``PaCoReResult.models``: seconds summed over that model's
trajectories), and the arm's wall time. The ratios compare the panel with the strong model alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, asolve
from pacore_graph.coordination import Panel
from pacore_graph.models import OpenAICompatibleChatModel

ARMS = ("strong", "panel", "small")
MODELS = ("small", "strong")


def small_emulator() -> EmulatorConfig:
    return EmulatorConfig(model="small", ttft=0.02, token_delay=0.0005, output_tokens=(100, 300), seed=1)


def strong_emulator() -> EmulatorConfig:
    return EmulatorConfig(model="strong", ttft=0.2, token_delay=0.002, output_tokens=(400, 1200), seed=2)


class PanelSettings(BenchSettings):
    problems: int = Field(8, ge=1)
    rounds: list[int] = Field(default_factory=lambda: [16], description="the schedule every arm runs")
    small_weight: float = Field(3.0, gt=0, description="the panel's weight of the small model (strong: 1)")
    concurrency: int = Field(4, ge=1, description="problems in flight")
    small: EmulatorConfig = Field(default_factory=small_emulator)
    strong: EmulatorConfig = Field(default_factory=strong_emulator)

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """4 problems at [8]: a few seconds."""
        return {"problems": 4, "rounds": [8]}


class ModelCost(BaseModel):
    requests: int = Field(description="requests its server received (the server's count)")
    completion_tokens: int = Field(description="completion tokens its server generated (the server's count)")
    trajectories: int = Field(description="trajectories the client's per-model account gave it")
    seconds: float = Field(description="its trajectories' seconds, summed (the client's account; 0 without a panel)")


class ArmRun(BaseModel):
    arm: str
    models: dict[str, ModelCost]
    wall_s: float

    @property
    def tokens(self) -> int:
        return sum(cost.completion_tokens for cost in self.models.values())

    @property
    def requests(self) -> int:
        return sum(cost.requests for cost in self.models.values())


def arm_config(arm: str, settings: PanelSettings) -> PaCoReConfig:
    """The arm's config: a panel of both models, or one of them for every slot (a panel of one, so its trajectories
    are named and timed the same way)."""
    if arm == "panel":
        panel = Panel.model_validate({"models": {"small": settings.small_weight, "strong": 1}, "synthesizer": "strong"})
    else:
        panel = Panel.model_validate({"models": {"small": 0, "strong": 0, arm: 1}, "synthesizer": arm})
    return PaCoReConfig(rounds=settings.rounds, panel=panel, spaced_gc=True, max_concurrency=256)


async def run_arm(arm: str, settings: PanelSettings, servers: dict[str, Emulator]) -> ArmRun:
    for server in servers.values():
        server.reset()
    clients = {
        name: OpenAICompatibleChatModel(base_url=server.base_url, model=server.config.model)
        for name, server in servers.items()
    }
    config = arm_config(arm, settings)
    slots = asyncio.Semaphore(settings.concurrency)

    async def one(index: int) -> dict[str, dict[str, Any]]:
        async with slots:
            result = await asolve(clients, f"Problem {index}: what is {index} * 7?", config)
        return result.models

    started = time.monotonic()
    try:
        accounts = await asyncio.gather(*(one(index) for index in range(settings.problems)))
    finally:
        for chat in clients.values():
            await chat.aclose()
    wall = time.monotonic() - started
    costs = {}
    for name, server in servers.items():
        stats = await asyncio.to_thread(server.stats)
        mine = [account[name] for account in accounts if name in account]
        costs[name] = ModelCost(
            requests=stats["requests"],
            completion_tokens=stats["completion_tokens"],
            trajectories=sum(account["trajectories"] for account in mine),
            seconds=round(sum(account["seconds"] for account in mine), 2),
        )
    return ArmRun(arm=arm, models=costs, wall_s=round(wall, 2))


class PanelReport(BaseModel):
    settings: PanelSettings
    runs: list[ArmRun]

    def run(self, arm: str) -> ArmRun:
        return next(run for run in self.runs if run.arm == arm)

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``pacore bench panel`` prints last: the panel against the strong model alone."""
        panel, strong = self.run("panel"), self.run("strong")
        return {
            "problems": self.settings.problems,
            "rounds": self.settings.rounds,
            "small_weight": self.settings.small_weight,
            "panel_vs_strong": {
                "strong_tokens": round(panel.models["strong"].completion_tokens / strong.tokens, 3),
                "tokens": round(panel.tokens / strong.tokens, 3),
                "wall": round(panel.wall_s / strong.wall_s, 3) if strong.wall_s else None,
            },
            "arms": {run.arm: run.model_dump(exclude={"arm"}) for run in self.runs},
        }


async def run_benchmark(settings: PanelSettings, on_run: Callable[[ArmRun], None] | None = None) -> PanelReport:
    """The three arms, each on the two servers reset before it."""
    report = PanelReport(settings=settings, runs=[])
    with Emulator(settings.small) as small, Emulator(settings.strong) as strong:
        for arm in ARMS:
            run = await run_arm(arm, settings, {"small": small, "strong": strong})
            report.runs.append(run)
            if on_run is not None:
                on_run(run)
    return report
