"""``pacore bench coordination``: the operator's coordination options side by side on the serving emulator.

The same problems run once per method, each against a freshly reset emulator (so the first round of every
method gets the very same replies): the paper's pipeline, a token budget, early stop by agreement, subset
references, deduplicated references and a final vote. Per method it reports

- completion tokens the emulator generated, cut requests included up to their cut (the server's count:
  a cancelled request's tokens never reach the client);
- wall time of the whole batch (every problem in flight at once);
- agreement: the share of problems whose final extracted answer is the emulator's majority answer (the
  answer most trajectories of that problem reach; :class:`~pacore_emulator.config.AnswerMix`).

``tokens_saved_early_stop`` is the share of the paper pipeline's tokens that early stop did not spend;
``agreement_kept_early_stop`` the share of the problems the paper pipeline answered with the majority answer
that early stop also answered with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, field_validator

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_emulator import Emulator, EmulatorConfig
from pacore_emulator.config import AnswerMix
from pacore_emulator.replies import majority_answer
from pacore_graph import PaCoReConfig, asolve
from pacore_graph.coordination import Budget, EarlyStop, boxed_answer
from pacore_graph.models import OpenAICompatibleChatModel

METHODS = ("paper", "budget", "early_stop", "subset", "dedup", "vote")
VARIANTS = (*METHODS[1:], "verifier")  # what `pacore bench math` offers beside the paper's PaCoRe


def method_options(method: str, *, lead: int = 4, subset: int = 8, budget_tokens: int | None = None) -> dict[str, Any]:
    """The PaCoReConfig fields of one coordination method (the paper's: none). Shared by this benchmark and
    ``pacore bench math``, so that both measure the same settings."""
    boxed = {"answer_extractor": "boxed"}
    match method:
        case "paper":
            return {}
        case "budget" if budget_tokens is not None:
            return {**boxed, "budget": Budget(tokens=budget_tokens)}
        case "budget":
            raise ValueError("the budget method needs a token budget per problem")
        case "early_stop":
            return {**boxed, "early_stop": EarlyStop(lead=lead, unbeatable=True, skip_unanimous=True)}
        case "subset":
            return {"reference_subset": subset}
        case "dedup":
            return {**boxed, "dedup_references": True}
        case "vote" | "verifier":
            return {**boxed, "final_selector": method}
    raise ValueError(f"unknown coordination method {method!r}: choose from {', '.join(('paper', *VARIANTS))}")


def bench_emulator() -> EmulatorConfig:
    """Reasoning lengths of 400 to 4000 tokens, short conclusions, the default answer mix, and replies that
    miss the majority answer 1.3x longer (wrong chains run longer; see AnswerMix)."""
    return EmulatorConfig(
        ttft=0.05,
        token_delay=0.001,
        output_tokens=(400, 4000),
        answer_tokens=8,
        answers=AnswerMix(minority_length=1.3),
    )


class CoordinationSettings(BenchSettings):
    problems: int = Field(200, ge=1)
    concurrency: int = Field(48, ge=1, description="problems in flight")
    spacing: float = Field(
        0.05,
        ge=0,
        description="seconds between problem starts, so that a problem's trajectories start together "
        "(a burst of thousands of requests would let the client lag behind the emulator's clock)",
    )
    schedule: list[int] = Field(default_factory=lambda: [32, 4], description="the paper's high preset")
    methods: list[str] = Field(default_factory=lambda: list(METHODS))
    lead: int = Field(4, ge=1, description="early stop: a lead this large over the runner-up ends a round")
    budget_share: float = Field(0.5, gt=0, description="token budget per problem, as a share of the paper's mean")
    subset: int = Field(8, ge=1, description="references each trajectory sees in the subset method")
    emulator: EmulatorConfig = Field(default_factory=bench_emulator)

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, methods: list[str]) -> list[str]:
        unknown = [method for method in methods if method not in METHODS]
        if unknown or not methods:
            raise ValueError(f"unknown methods {unknown}: choose from {', '.join(METHODS)}")
        return list(dict.fromkeys(methods))

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """100 problems: about three minutes on a quiet machine."""
        return {"problems": 100}

    def config(self, method: str, paper_tokens: float) -> PaCoReConfig:
        """The operator's configuration of one method (``paper_tokens``: the paper's mean tokens per problem)."""
        budget = max(1, round(self.budget_share * paper_tokens))
        return PaCoReConfig(
            rounds=self.schedule,
            max_concurrency=self.concurrency * max(self.schedule),
            spaced_gc=True,
            **method_options(method, lead=self.lead, subset=self.subset, budget_tokens=budget),
        )


class MethodRun(BaseModel):
    method: str
    config: dict[str, Any] = Field(description="the options that differ from the paper pipeline")
    problems: int
    answered: int
    completion_tokens: int = Field(description="generated by the emulator, cut requests up to their cut")
    client_tokens: int = Field(description="completion tokens the results account for (finished trajectories)")
    prompt_tokens: int = Field(description="prompt tokens the emulator received (dedup and subsets shrink them)")
    requests: int
    cancelled: int = Field(description="requests closed mid-generation (early stop, budget)")
    wall_s: float
    lag_p99_s: float = Field(
        description="99th percentile of the client event loop's lag: above ~0.1 s the client "
        "reacts late (a busy machine) and early stop and budgets cut later than they could"
    )
    agreement: float = Field(description="share of problems answered with the emulator's majority answer")
    answers: list[str | None] = Field(default_factory=list, description="final extracted answer per problem")
    agreeing: list[bool] = Field(default_factory=list, description="per problem, in order")
    stops: dict[str, int] = Field(default_factory=dict, description="runs that skipped rounds, by reason")
    budget_overshoot_max: int | None = Field(None, description="largest tokens over the budget of one problem")


def problems(settings: CoordinationSettings) -> list[str]:
    return [
        f"Problem {n}: how many ordered pairs (a, b) of positive integers satisfy a * b = {n + 12}?"
        for n in range(settings.problems)
    ]


async def run_method(emulator: Emulator, settings: CoordinationSettings, method: str, paper_tokens: float) -> MethodRun:
    """Every problem at once under one method, against the freshly reset emulator."""
    config = settings.config(method, paper_tokens)
    texts = problems(settings)
    emulator.reset()
    model = OpenAICompatibleChatModel(base_url=emulator.base_url, model=emulator.config.model)
    slots = asyncio.Semaphore(settings.concurrency)

    async def solve(position: int, text: str) -> Any:
        await asyncio.sleep(position * settings.spacing)
        async with slots:
            return await asolve(model, text, config)

    lags: list[float] = []
    watch = asyncio.create_task(_watch_lag(lags))
    started = time.monotonic()
    try:
        results = await asyncio.gather(*(solve(n, text) for n, text in enumerate(texts)), return_exceptions=True)
    finally:
        watch.cancel()
        await model.aclose()
    wall = time.monotonic() - started
    await asyncio.sleep(0.2)  # let the emulator notice the last closed connections
    stats = await asyncio.to_thread(emulator.stats)
    answered = [r for r in results if not isinstance(r, BaseException)]
    answers = [None if isinstance(r, BaseException) else boxed_answer(r.answer) for r in results]
    agreeing = [
        answer == str(majority_answer(emulator.config, text)) for answer, text in zip(answers, texts, strict=True)
    ]
    stops: dict[str, int] = {}
    for result in answered:
        if result.outcome.stop:
            stops[result.outcome.stop] = stops.get(result.outcome.stop, 0) + 1
    overshoot = None
    if config.budget.tokens is not None:
        overshoot = max((r.ttc - config.budget.tokens for r in answered), default=0)
    return MethodRun(
        method=method,
        config=config.model_dump(
            mode="json", exclude_defaults=True, exclude={"rounds", "max_concurrency", "spaced_gc"}
        ),
        problems=len(texts),
        answered=len(answered),
        completion_tokens=stats["completion_tokens"] + stats["cancelled_tokens"],
        client_tokens=sum(r.ttc for r in answered),
        prompt_tokens=stats["prompt_tokens"],
        requests=stats["requests"],
        cancelled=stats["cancelled"],
        wall_s=round(wall, 2),
        lag_p99_s=round(sorted(lags)[int(len(lags) * 0.99)] if lags else 0.0, 3),
        agreement=round(sum(agreeing) / len(texts), 4),
        answers=answers,
        agreeing=agreeing,
        stops=stops,
        budget_overshoot_max=overshoot,
    )


async def _watch_lag(lags: list[float], tick: float = 0.01) -> None:
    """How late the event loop wakes a task that asked to sleep ``tick``: the client's reaction delay."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(tick)
        lags.append(time.monotonic() - before - tick)


class CoordinationReport(BaseModel):
    settings: CoordinationSettings
    runs: list[MethodRun]

    def run(self, method: str) -> MethodRun:
        return next(run for run in self.runs if run.method == method)

    def saved(self, method: str) -> float:
        """Share of the paper pipeline's completion tokens that ``method`` did not spend."""
        paper = self.run("paper").completion_tokens
        return round(1 - self.run(method).completion_tokens / paper, 4) if paper else 0.0

    def kept(self, method: str) -> float:
        """Of the problems the paper pipeline answered with the majority answer, the share ``method`` did too."""
        paper, other = self.run("paper").agreeing, self.run(method).agreeing
        agreed = [theirs for ours, theirs in zip(paper, other, strict=True) if ours]
        return round(sum(agreed) / len(agreed), 4) if agreed else 0.0

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``pacore bench coordination`` prints last."""
        methods = [run.method for run in self.runs]
        figures = {
            run.method: {
                "completion_tokens": run.completion_tokens,
                "tokens_per_problem": round(run.completion_tokens / run.problems),
                "tokens_saved": self.saved(run.method),
                "prompt_tokens": run.prompt_tokens,
                "wall_s": run.wall_s,
                "lag_p99_s": run.lag_p99_s,
                "agreement": run.agreement,
                "agreement_kept": self.kept(run.method),
                "cancelled": run.cancelled,
                "answered": run.answered,
                **({"stops": run.stops} if run.stops else {}),
                **({"budget_overshoot_max": run.budget_overshoot_max} if run.budget_overshoot_max is not None else {}),
            }
            for run in self.runs
        }
        summary: dict[str, Any] = {}
        if "early_stop" in methods:
            summary["tokens_saved_early_stop"] = self.saved("early_stop")
            summary["agreement_kept_early_stop"] = self.kept("early_stop")
        summary.update(
            problems=self.settings.problems,
            schedule=self.settings.schedule,
            mix=self.settings.emulator.answers.weights,
            methods=figures,
        )
        return summary


async def run_benchmark(
    settings: CoordinationSettings, on_run: Callable[[MethodRun], None] | None = None
) -> CoordinationReport:
    """The paper pipeline first (the budget is a share of its tokens), then every other method."""
    if "paper" not in settings.methods:
        settings = settings.model_copy(update={"methods": ["paper", *settings.methods]})
    report = CoordinationReport(settings=settings, runs=[])
    with Emulator(settings.emulator) as emulator:
        paper_tokens = 0.0
        for method in ["paper", *[m for m in settings.methods if m != "paper"]]:
            run = await run_method(emulator, settings, method, paper_tokens)
            if method == "paper":
                paper_tokens = run.client_tokens / max(run.answered, 1)
            report.runs.append(run)
            if on_run:
                on_run(run)
    return report
