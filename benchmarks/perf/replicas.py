"""``pacore bench replicas``: one PaCoRe workload over emulated GPU replicas, routed several ways, side by side.

The workload: P problems with schedule [32, 4] and P with [16], all in flight at once, against N emulated
replicas (:meth:`EmulatorConfig.gpu_replica`: prefix cache, prefill cost, PaCoRe-sized conclusions). It is
sent once through the client's own spreading over every replica URL (fewest requests in flight: the
baseline) and once through vllm-router per policy. Each run starts from empty caches and zeroed counters.
Then the best router policy and the spreading run again while the busiest replica is killed (SIGKILL)
mid-run: every problem must still be answered and no trajectory lost.

What the emulator models, and what not, is in :mod:`pacore_benchmarks.perf.emulator_gpu`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.perf.emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, Problem, asolve
from pacore_graph.extend import ROUTER_POLICY, ServerProcess, free_port, router_command

SPREAD = "spread"  # the client's built-in spreading over every replica URL
COMPARED_POLICIES = ["round_robin", "cache_aware", "consistent_hash", "sticky_least_loaded"]


class ReplicasSettings(BaseModel):
    replicas: int = Field(4, ge=2)
    problems: int = Field(8, ge=1, description="problems per schedule")
    schedules: list[list[int]] = Field(default_factory=lambda: [[32, 4], [16]])
    policies: list[str] = Field(default_factory=lambda: list(COMPARED_POLICIES))
    kill: bool = Field(True, description="kill a replica mid-run under the best policy")
    kill_spread: bool = Field(True, description="and under the spreading, for comparison")
    kill_at: float = Field(0.4, gt=0, lt=1, description="when to kill, as a fraction of the clean run's wall time")
    emulator: EmulatorConfig = Field(default_factory=EmulatorConfig.gpu_replica)

    @classmethod
    def quick(cls, **overrides: Any) -> ReplicasSettings:
        """About a minute: 4 problems per schedule, no kill under the spreading."""
        return cls(**{"problems": 4, "kill_spread": False, **overrides})


class ReplicaStats(BaseModel):
    """What one replica computed in a run (the emulator's counters)."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    busy_s: float = 0.0
    prefill_s: float = 0.0


class PolicyRun(BaseModel):
    policy: str
    killed: int | None = Field(None, description="index of the replica killed mid-run")
    cut: int = Field(0, description="requests the killed replica was serving when it died")
    wall_s: float
    problems: int
    answered: int
    trajectories: int
    failed_trajectories: int
    retries: int
    replicas: list[ReplicaStats]

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.replicas)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens the replicas computed: those their prefix caches did not hold."""
        return sum(r.prompt_tokens - r.cached_tokens for r in self.replicas)

    @property
    def prefill_ratio(self) -> float:
        return self.prefill_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def lost(self) -> int:
        """Problems without an answer plus trajectories that failed after every retry."""
        return self.problems - self.answered + self.failed_trajectories

    @property
    def balance(self) -> float:
        """Busiest replica's busy time over the mean: 1.0 is perfectly even."""
        busy = [r.busy_s for r in self.replicas]
        return max(busy) / (sum(busy) / len(busy)) if sum(busy) else 1.0


def workload(settings: ReplicasSettings) -> list[tuple[list[int], Problem]]:
    """Distinct problems, P per schedule (the emulator derives every reply from the prompt)."""
    return [
        (schedule, Problem(id=f"{'-'.join(map(str, schedule))}:{n}",
                           messages=f"Problem {n} for {schedule}: how many pairs (a, b) with a + b = {n + 7}?"))
        for schedule in settings.schedules
        for n in range(settings.problems)
    ]  # fmt: skip


class ReplicaBench:
    """N emulated replicas on fixed ports (a killed one comes back on its port) and the runs over them."""

    def __init__(self, settings: ReplicasSettings, log_dir: Path):
        self.settings = settings
        self.log_dir = log_dir
        self.configs = [settings.emulator.model_copy(update={"replica": index, "port": free_port()})
                        for index in range(settings.replicas)]  # fmt: skip
        self.emulators: list[Emulator] = []

    def __enter__(self) -> ReplicaBench:
        try:
            self.emulators = [Emulator(config).start() for config in self.configs]
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        for emulator in self.emulators:
            emulator.stop()

    async def run(self, policy: str, *, kill_after: float | None = None) -> PolicyRun:
        """The workload routed by ``policy`` (``spread`` or a vllm-router policy); optionally kill a replica."""
        from pacore_benchmarks.perf.session_key import SessionKeyedChatModel
        from pacore_graph.extend import OpenAICompatibleChatModel

        for emulator in self.emulators:
            emulator.reset()
        model_name = self.settings.emulator.model
        router: ServerProcess | None = None
        if policy == SPREAD:
            model = OpenAICompatibleChatModel(base_urls=[e.base_url for e in self.emulators], model=model_name)
        else:
            port = free_port()
            command = router_command([e.root_url for e in self.emulators], port=port, policy=policy)
            router = ServerProcess("vllm-router", command, f"http://127.0.0.1:{port}", self.log_dir / f"{policy}.log")
            router.start().wait_ready(60)
            model = SessionKeyedChatModel(base_urls=[router.url + "/v1"], model=model_name)
        try:
            started = time.monotonic()
            killer = asyncio.create_task(self._kill_busiest(kill_after)) if kill_after is not None else None
            results = await solve_all(model, workload(self.settings))
            wall = time.monotonic() - started
            killed, snapshot, cut = await killer if killer is not None else (None, None, 0)
        finally:
            await model.aclose()
            if router is not None:
                router.stop()
        stats = [snapshot if index == killed else ReplicaStats(**emulator.stats())
                 for index, emulator in enumerate(self.emulators)]  # fmt: skip
        if killed is not None:
            self.emulators[killed] = Emulator(self.configs[killed]).start()  # back on its port for the next run
        return summarise(policy, results, stats, wall, killed).model_copy(update={"cut": cut})

    async def _kill_busiest(self, after: float) -> tuple[int, ReplicaStats, int]:
        """SIGKILL the replica serving the most requests ``after`` seconds in (once one serves any).

        Returns its index, its counters as it died and how many requests it was serving."""
        await asyncio.sleep(after)
        for _ in range(500):
            stats = await asyncio.gather(*(asyncio.to_thread(e.stats) for e in self.emulators))
            if any(stat["active"] for stat in stats):
                break
            await asyncio.sleep(0.01)
        victim = max(range(len(stats)), key=lambda index: stats[index]["active"])
        process = self.emulators[victim].process
        assert process is not None
        process.kill()
        process.wait()
        self.emulators[victim].stop()
        return victim, ReplicaStats(**stats[victim]), stats[victim]["active"]


async def solve_all(model: Any, items: Sequence[tuple[list[int], Problem]]) -> list[Any]:
    """Every problem at once; a problem that fails comes back as its exception."""
    calls = [asolve(model, problem.messages, PaCoReConfig(rounds=schedule)) for schedule, problem in items]
    return await asyncio.gather(*calls, return_exceptions=True)


def summarise(
    policy: str, results: list[Any], stats: list[ReplicaStats], wall: float, killed: int | None
) -> PolicyRun:
    answered = [r for r in results if not isinstance(r, BaseException) and r.answer.strip()]
    trajectories = [t for r in answered for record in r.rounds for t in record.trajectories]
    return PolicyRun(
        policy=policy,
        killed=killed,
        wall_s=round(wall, 2),
        problems=len(results),
        answered=len(answered),
        trajectories=len(trajectories),
        failed_trajectories=sum(1 for t in trajectories if t.error),
        retries=sum(t.attempts - 1 for t in trajectories),
        replicas=stats,
    )


class ReplicasReport(BaseModel):
    settings: ReplicasSettings
    runs: list[PolicyRun]
    kills: list[PolicyRun] = Field(default_factory=list)

    @property
    def spread(self) -> PolicyRun:
        return next(run for run in self.runs if run.policy == SPREAD)

    def best(self) -> PolicyRun:
        """The router policy with the smallest share of prompt tokens computed, among those no slower than
        the spreading. (A share, not a count: replies depend on where a request ran, so the prompts that
        later rounds send differ a little between runs.)"""
        routed = [run for run in self.runs if run.policy != SPREAD and run.lost == 0]
        fast = [run for run in routed if run.wall_s <= self.spread.wall_s] or routed
        return min(fast, key=lambda run: (round(run.prefill_ratio, 2), run.wall_s))

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``pacore bench replicas`` prints last."""
        best, spread = self.best(), self.spread
        killed = {run.policy: run for run in self.kills}
        return {
            "prefill_ratio_best_vs_spread": round(best.prefill_tokens / max(spread.prefill_tokens, 1), 3),
            "wall_ratio_best_vs_spread": round(best.wall_s / spread.wall_s, 3),
            "lost": killed[best.policy].lost if best.policy in killed else None,
            "default_policy": best.policy,
            "launcher_default": ROUTER_POLICY,
            "replicas": self.settings.replicas,
            "problems": len(workload(self.settings)),
            "runs": {run.policy: _figures(run) for run in self.runs},
            "killed_runs": {run.policy: _figures(run) for run in self.kills},
        }


def _figures(run: PolicyRun) -> dict[str, Any]:
    return {
        "wall_s": run.wall_s,
        "prompt_tokens": run.prompt_tokens,
        "prefill_tokens": run.prefill_tokens,
        "prefill_ratio": round(run.prefill_ratio, 3),
        "requests_per_replica": [r.requests for r in run.replicas],
        "busy_balance": round(run.balance, 2),
        "lost": run.lost,
        "retries": run.retries,
        **({"killed_replica": run.killed, "requests_cut": run.cut} if run.killed is not None else {}),
    }


async def run_benchmark(
    settings: ReplicasSettings, log_dir: str | None = None, on_run: Callable[[PolicyRun], None] | None = None
) -> ReplicasReport:
    """The spreading, each router policy, then a replica killed under the best policy and under the spreading."""
    folder = Path(log_dir or tempfile.mkdtemp(prefix="pacore-replicas-"))
    folder.mkdir(parents=True, exist_ok=True)
    report = ReplicasReport(settings=settings, runs=[])
    with ReplicaBench(settings, folder) as bench:
        for policy in [SPREAD, *settings.policies]:
            report.runs.append(await bench.run(policy))
            if on_run:
                on_run(report.runs[-1])
        killed = [report.best(), report.spread][: 2 if settings.kill_spread else 1] if settings.kill else []
        for clean in killed:
            report.kills.append(await bench.run(clean.policy, kill_after=settings.kill_at * clean.wall_s))
            if on_run:
                on_run(report.kills[-1])
    return report
