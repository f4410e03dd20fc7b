"""``pacore bench replicas``: PaCoRe workloads over emulated GPU replicas, routed several ways, side by side.

Three workloads (:mod:`~pacore_benchmarks.perf.replicas_workloads`) against N emulated replicas
(:meth:`EmulatorConfig.gpu_replica`: prefix cache, prefill cost, decoding slowed by the batch's context,
PaCoRe-sized conclusions): the batch ([32, 4] and [16], all at once), which gives the headline figures; [32, 4]
problems one at a time (latency on an otherwise idle cluster); and the chat and agent one. Each is sent through the
client-side spreading over every replica URL (fewest requests in flight,
:mod:`~pacore_benchmarks.perf.replicas_spread`: the baseline) and through vllm-router per policy, with the project's
client as any user would run it (it sends the session key the router can follow). Each run starts from empty caches
and zeroed counters. Then the best router policy and the spreading run the batch workload again while the busiest
replica is killed (SIGKILL) mid-run: every problem must still be answered and no trajectory lost.

Each run also gets its *floor*: the prompt tokens the same requests would cost one replica with an unlimited prefix
cache (each distinct prefix block once, from the replicas' request logs). No routing computes less, so a policy's
prefill over its floor says how much routing left on the table, and the spreading's floor over its prefill is the
lowest the headline ratio could go on that run.

What the emulator models, and what not, is in :mod:`pacore_emulator.gpu`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.replicas_workloads import CHAT, ONE, PACORE, Workload, chat_workload, pacore_workload
from pacore_emulator import Emulator, EmulatorConfig
from pacore_emulator.gpu import PrefixCache, prompt_text
from pacore_emulator.replies import estimate_prompt_tokens
from pacore_graph import PaCoReConfig, asolve, chat_model
from pacore_graph.extend import ROUTER_POLICY, ServerProcess, free_port, router_command

SPREAD = "spread"  # the client-side spreading over every replica URL
COMPARED_POLICIES = ["round_robin", "cache_aware", "consistent_hash", "sticky_least_loaded"]
CLOSE = 0.1  # prefill shares this close (relative) to the smallest count as equal


class ReplicasSettings(BenchSettings):
    replicas: int = Field(4, ge=2)
    problems: int = Field(8, ge=1, description="problems per schedule")
    schedules: list[list[int]] = Field(default_factory=lambda: [[32, 4], [16]])
    one_at_a_time: int = Field(2, ge=0, description="[32, 4] problems solved one after another (0: none)")
    chat_problems: int = Field(8, ge=0, description="conversations, and agent steps, in the chat workload (0: none)")
    policies: list[str] = Field(default_factory=lambda: list(COMPARED_POLICIES))
    kill: bool = Field(True, description="kill a replica mid-run under the best policy")
    kill_spread: bool = Field(True, description="and under the spreading, for comparison")
    kill_at: float = Field(0.4, gt=0, lt=1, description="when to kill, as a fraction of the clean run's wall time")
    emulator: EmulatorConfig = Field(default_factory=EmulatorConfig.gpu_replica)

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """About a minute: 4 problems per schedule and of each kind, one alone, no kill under the spreading."""
        return {"problems": 4, "chat_problems": 4, "one_at_a_time": 1, "kill_spread": False}

    def workloads(self) -> dict[str, Workload]:
        one = {ONE: pacore_workload(self.one_at_a_time, [[32, 4]])} if self.one_at_a_time else {}
        chat = {CHAT: chat_workload(self.chat_problems)} if self.chat_problems else {}
        return {PACORE: pacore_workload(self.problems, self.schedules), **one, **chat}


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
    workload: str = PACORE
    killed: int | None = Field(None, description="index of the replica killed mid-run")
    cut: int = Field(0, description="requests the killed replica was serving when it died")
    wall_s: float
    problems: int
    answered: int
    trajectories: int
    failed_trajectories: int
    retries: int
    floor_tokens: int = Field(0, description="prompt tokens no routing could avoid computing (see prefill_floor)")
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
    def over_floor(self) -> float:
        """Prefill computed over the least any routing of the same requests could compute: 1.0 is ideal."""
        return self.prefill_tokens / self.floor_tokens if self.floor_tokens else 0.0

    @property
    def lost(self) -> int:
        """Problems without an answer plus trajectories that failed after every retry."""
        return self.problems - self.answered + self.failed_trajectories

    @property
    def balance(self) -> float:
        """Busiest replica's busy time over the mean: 1.0 is perfectly even."""
        return _max_over_mean([r.busy_s for r in self.replicas])

    @property
    def decode_balance(self) -> float:
        """Most tokens one replica decoded over the mean: uneven decoding is what concentrating a round's
        trajectories on one replica costs (its decode steps slow with the context its batch holds)."""
        return _max_over_mean([r.completion_tokens for r in self.replicas])


def _max_over_mean(values: list[float]) -> float:
    return max(values) / (sum(values) / len(values)) if sum(values) else 1.0


def prefill_floor(bodies: Iterable[dict[str, Any]], block_size: int) -> int:
    """Prompt tokens one replica with an unbounded prefix cache would compute for these requests: each distinct
    prefix block once. Every routing over any number of replicas computes at least this much."""
    cache = PrefixCache(sys.maxsize, block_size)
    computed = 0
    for body in bodies:
        tokens = estimate_prompt_tokens(body["messages"])
        computed += tokens - cache.admit(prompt_text(body["messages"]), tokens)
    return computed


def _logged_bodies(logs: list[Path], offsets: list[int]) -> list[dict[str, Any]]:
    """The request bodies the replicas logged past ``offsets``, in the order they arrived."""
    records = []
    for log, offset in zip(logs, offsets, strict=True):
        with log.open(encoding="utf-8") as lines:
            lines.seek(offset)
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # the last line of a replica killed while writing it
                    continue
                if "body" in record and not record["fault"]:
                    records.append(record)
    return [record["body"] for record in sorted(records, key=lambda record: record["t"])]


class ReplicaBench:
    """N emulated replicas on fixed ports (a killed one comes back on its port) and the runs over them."""

    def __init__(self, settings: ReplicasSettings, log_dir: Path, request_dir: Path):
        self.settings = settings
        self.log_dir = log_dir
        self.request_logs = [request_dir / f"replica-{index}.jsonl" for index in range(settings.replicas)]
        self.configs = [
            settings.emulator.model_copy(
                update={"replica": index, "port": free_port(), "request_log": str(self.request_logs[index])}
            )
            for index in range(settings.replicas)
        ]
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

    async def run(
        self, policy: str, workloads: dict[str, Workload], *, kill_after: float | None = None
    ) -> list[PolicyRun]:
        """Each workload in turn routed by ``policy`` (``spread`` or a vllm-router policy), from empty caches;
        with ``kill_after``, a replica is killed that many seconds into the (single) workload."""
        from pacore_benchmarks.perf.replicas_spread import SpreadChatModel

        model_name = self.settings.emulator.model
        router: ServerProcess | None = None
        if policy == SPREAD:
            model: Any = SpreadChatModel.over([e.base_url for e in self.emulators], model_name)
        else:
            port = free_port()
            command = router_command([e.root_url for e in self.emulators], port=port, policy=policy)
            router = ServerProcess("vllm-router", command, f"http://127.0.0.1:{port}", self.log_dir / f"{policy}.log")
            router.start().wait_ready(60)
            model = chat_model(router.url + "/v1", model_name)
        runs = []
        try:
            for name, workload in workloads.items():
                runs.append(await self._run_one(policy, name, model, workload, kill_after))
        finally:
            await model.aclose()
            if router is not None:
                router.stop()
        return runs

    async def _run_one(
        self, policy: str, name: str, model: Any, workload: Workload, kill_after: float | None
    ) -> PolicyRun:
        for emulator in self.emulators:
            emulator.reset()
        offsets = [log.stat().st_size for log in self.request_logs]
        started = time.monotonic()
        killer = asyncio.create_task(self._kill_busiest(kill_after)) if kill_after is not None else None
        results = await (solve_one_by_one if name == ONE else solve_all)(model, workload)
        wall = time.monotonic() - started
        killed, snapshot, cut = await killer if killer is not None else (None, None, 0)
        stats = [
            snapshot if index == killed and snapshot is not None else ReplicaStats(**emulator.stats())
            for index, emulator in enumerate(self.emulators)
        ]
        if killed is not None:
            self.emulators[killed] = Emulator(self.configs[killed]).start()  # back on its port for the next run
        floor = prefill_floor(_logged_bodies(self.request_logs, offsets), self.settings.emulator.block_size)
        update = {"cut": cut, "workload": name, "floor_tokens": floor}
        return summarise(policy, results, stats, wall, killed).model_copy(update=update)

    async def _kill_busiest(self, after: float) -> tuple[int, ReplicaStats, int]:
        """SIGKILL the replica serving the most requests ``after`` seconds in (once one serves any).

        Returns its index, its counters as it died and how many requests it was serving."""
        await asyncio.sleep(after)
        stats: list[dict[str, Any]] = []
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


async def solve_all(model: Any, items: Workload) -> list[Any]:
    """Every problem at once; a problem that fails comes back as its exception."""
    calls = [asolve(model, problem.messages, PaCoReConfig(rounds=schedule)) for schedule, problem in items]
    return await asyncio.gather(*calls, return_exceptions=True)


async def solve_one_by_one(model: Any, items: Workload) -> list[Any]:
    """Each problem alone, one after another; a problem that fails comes back as its exception."""
    return [(await solve_all(model, [item]))[0] for item in items]


def summarise(policy: str, results: list[Any], stats: list[ReplicaStats], wall: float, killed: int | None) -> PolicyRun:
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

    def of(self, workload: str) -> list[PolicyRun]:
        return [run for run in self.runs if run.workload == workload]

    def spread(self, workload: str = PACORE) -> PolicyRun:
        return next(run for run in self.of(workload) if run.policy == SPREAD)

    def best(self, workload: str = PACORE) -> PolicyRun:
        """The router policy that computes the smallest share of the prompt tokens sent, losing nothing; among
        shares within :data:`CLOSE` of the smallest, the one that keeps the replicas most evenly busy.

        With the same work done, the busiest replica sets the wall time; its busy time over the mean is that
        figure without the noise a shared machine puts into wall times, so two runs pick the same policy. A
        share, not a count: replies depend on where a request ran, so later rounds' prompts differ between runs.
        """
        routed = [run for run in self.of(workload) if run.policy != SPREAD and run.lost == 0]
        least = min(run.prefill_ratio for run in routed)
        return min((run for run in routed if run.prefill_ratio <= least * (1 + CLOSE)), key=lambda run: run.balance)

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``pacore bench replicas`` prints last: the headline figures on the batch
        workload, the chat workload's under the same (default) policy, and every run's figures."""
        best, spread = self.best(), self.spread()
        killed = {run.policy: run for run in self.kills}
        summary = {
            "prefill_ratio_best_vs_spread": _ratio(best.prefill_tokens, spread.prefill_tokens),
            # the least any routing could compute of the spreading's own requests, over what it computed:
            # prefill_ratio_best_vs_spread cannot go (much) below this, whatever the policy
            "prefill_floor_ratio_vs_spread": _ratio(spread.floor_tokens, spread.prefill_tokens),
            "prefill_best_over_floor": round(best.over_floor, 3),
            "wall_ratio_best_vs_spread": _ratio(best.wall_s, spread.wall_s),
            "lost": killed[best.policy].lost if best.policy in killed else None,
            "default_policy": best.policy,
            "launcher_default": ROUTER_POLICY,
            "replicas": self.settings.replicas,
            "problems": spread.problems,
            "runs": {run.policy: _figures(run) for run in self.of(PACORE)},
            "killed_runs": {run.policy: _figures(run) for run in self.kills},
        }
        if self.of(ONE):
            default, alone = next(run for run in self.of(ONE) if run.policy == best.policy), self.spread(ONE)
            fastest = min(
                (run for run in self.of(ONE) if run.policy != SPREAD and run.lost == 0), key=lambda run: run.wall_s
            )
            summary |= {
                "one_at_a_time_wall_ratio_default_vs_spread": _ratio(default.wall_s, alone.wall_s),
                "one_at_a_time_fastest_policy": fastest.policy,
                "one_at_a_time_wall_ratio_fastest_vs_default": _ratio(fastest.wall_s, default.wall_s),
                "one_at_a_time_runs": {run.policy: _figures(run) for run in self.of(ONE)},
            }
        if self.of(CHAT):
            default, chat_spread = next(run for run in self.of(CHAT) if run.policy == best.policy), self.spread(CHAT)
            summary |= {
                "chat_prefill_ratio_default_vs_spread": _ratio(default.prefill_tokens, chat_spread.prefill_tokens),
                "chat_wall_ratio_default_vs_spread": _ratio(default.wall_s, chat_spread.wall_s),
                "chat_best_policy": self.best(CHAT).policy,
                "chat_problems": chat_spread.problems,
                "chat_runs": {run.policy: _figures(run) for run in self.of(CHAT)},
            }
        return summary


def _ratio(part: float, whole: float) -> float:
    return round(part / whole, 3) if whole else 0.0


def _figures(run: PolicyRun) -> dict[str, Any]:
    return {
        "wall_s": run.wall_s,
        "prompt_tokens": run.prompt_tokens,
        "prefill_tokens": run.prefill_tokens,
        "prefill_ratio": round(run.prefill_ratio, 3),
        "floor_tokens": run.floor_tokens,
        "prefill_over_floor": round(run.over_floor, 3),
        "requests_per_replica": [r.requests for r in run.replicas],
        "busy_balance": round(run.balance, 2),
        "decode_balance": round(run.decode_balance, 2),
        "answered": f"{run.answered}/{run.problems}",
        "lost": run.lost,
        "retries": run.retries,
        **({"killed_replica": run.killed, "requests_cut": run.cut} if run.killed is not None else {}),
    }


async def run_benchmark(
    settings: ReplicasSettings, log_dir: str | None = None, on_run: Callable[[PolicyRun], None] | None = None
) -> ReplicasReport:
    """The spreading and each router policy over every workload, then a replica killed under the best policy
    and under the spreading (the batch workload)."""
    report = ReplicasReport(settings=settings, runs=[])
    workloads = settings.workloads()
    with tempfile.TemporaryDirectory(prefix="pacore-replicas-") as scratch:
        folder = Path(log_dir or scratch)  # the routers' logs: kept only where the caller says
        folder.mkdir(parents=True, exist_ok=True)
        with ReplicaBench(settings, folder, Path(scratch)) as bench:
            await _run_all(report, bench, workloads, on_run)
    return report


async def _run_all(
    report: ReplicasReport,
    bench: ReplicaBench,
    workloads: dict[str, Workload],
    on_run: Callable[[PolicyRun], None] | None,
) -> None:
    """Every policy over every workload, then the kills, each run added to ``report`` as it ends."""
    settings = report.settings
    for policy in [SPREAD, *settings.policies]:
        for run in await bench.run(policy, workloads):
            report.runs.append(run)
            if on_run:
                on_run(run)
    killed = [report.best(), report.spread()][: 2 if settings.kill_spread else 1] if settings.kill else []
    for clean in killed:
        after = settings.kill_at * clean.wall_s
        (run,) = await bench.run(clean.policy, {PACORE: workloads[PACORE]}, kill_after=after)
        report.kills.append(run)
        if on_run:
            on_run(run)
