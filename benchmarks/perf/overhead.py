"""``pacore bench overhead``: what the operator costs beside the bare floor client, on the same emulator.

Each measured run is a separate process (``overhead_worker``), so CPU time and peak RSS belong to the
client alone; the emulator is yet another process. For every schedule the floor and the operator run
one after the other against the same emulator (reset in between, so both get the same replies).

With ``reference`` (a checkout of stepfun-ai/PaCoRe, see :mod:`~pacore_benchmarks.perf.reference`) the
reference pipeline runs each schedule and streaming workload too, as a third client in the same rotation
(floor, reference, operator; the same emulator, reset before every run).

Every client of a run has the same garbage-collector setting (``gc``): ``default``, CPython's collector
as a process finds it (what a user of ``PaCoReNode`` gets), or ``spaced``, full passes rarer while runs
are in flight (``PaCoReConfig(spaced_gc=True)`` for the operator, the same thresholds around the floor's
and the reference's runs). Each measurement records the thresholds it ran under; the tables and the JSON
summary say them.

Sections: the schedules (wall, CPU ms per trajectory, peak RSS), a streaming comparison (client tokens
per CPU-second), checkpoint bytes per problem with SQLite for [32, 4], the same workload through the
OpenAI-compatible endpoint (``pacore serve``) against the in-process operator, and scaling with K and
with the number of problems. The last stdout line is one JSON object (see :func:`summarise`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.overhead_worker import (
    ClientCost,
    ClientName,
    GcSetting,
    WorkerResult,
    WorkerSpec,
    make_problems,
)
from pacore_emulator import Emulator, EmulatorConfig

TARGETS = {"wall_ratio": 1.05, "cpu_ms_per_trajectory": 1.5, "stream_ratio": 0.8}
# the operator against the reference pipeline, checked when it ran: wall, client CPU, peak RSS (at most)
REFERENCE_TARGETS = {"wall": 0.95, "cpu": 0.8, "rss": 2.0}
# each target: (the summary figure it is on, what that figure is, its unit, whether it is a floor (>=) or a
# ceiling (<=), the limit); the summary's "targets" and every printed verdict say these
TARGET_FIGURES: dict[str, tuple[str, str, str, str, float]] = {
    "wall": ("wall_ratio", "wall, operator / floor, worst schedule", "x", "<=", TARGETS["wall_ratio"]),
    "cpu": (
        "cpu_ms_per_trajectory",
        "client CPU per trajectory, operator",
        " ms",
        "<=",
        TARGETS["cpu_ms_per_trajectory"],
    ),
    "stream": ("stream_ratio", "streamed tokens per CPU s, operator / floor", "x", ">=", TARGETS["stream_ratio"]),
    **{
        f"reference_{name}": (
            f"reference.worst.{name}",
            f"{what}, operator / reference, worst schedule",
            "x",
            "<=",
            limit,
        )
        for (name, limit), what in zip(REFERENCE_TARGETS.items(), ("wall", "client CPU", "peak RSS"), strict=True)
    },
}
DEFAULT_SCHEDULES: list[list[int]] = [[4], [16], [32, 4]]


class OverheadSettings(BenchSettings):
    """What to run. ``quick`` fills in smaller defaults where a field was left as None."""

    problems: int = Field(64, ge=1)
    concurrency: int = Field(1024, ge=1)
    schedules: list[list[int]] = Field(default_factory=lambda: [list(s) for s in DEFAULT_SCHEDULES])
    stream: bool | None = Field(None, description="True: every schedule streamed too; None: one probe; False: none")
    stream_schedule: list[int] = Field(default_factory=lambda: [16])
    repeats: int = Field(1, ge=1, description="runs per client and schedule; the median is reported")
    checkpoint: bool = True
    proxy: bool = Field(True, description="the operator behind the endpoint, beside the in-process operator")
    proxy_schedule: list[int] = Field(default_factory=lambda: [16])
    checkpoint_problems: int | None = Field(None, ge=1, description="default: min(problems, 16)")
    scaling: bool = True
    scaling_ks: list[int] = Field(default_factory=lambda: [4, 16, 64, 256])
    scaling_k_problems: int = Field(16, ge=1)
    scaling_problems: list[int] = Field(default_factory=lambda: [16, 64, 256])
    profile: bool = False
    reference: str | None = Field(None, description="a checkout of stepfun-ai/PaCoRe: its pipeline as a third client")
    gc: GcSetting = Field(
        "default",
        description="every client's GC: default (CPython's, what a PaCoReNode user "
        "gets) or spaced (PaCoReConfig.spaced_gc's thresholds around every client's runs)",
    )
    emulator: EmulatorConfig = Field(
        default_factory=lambda: EmulatorConfig(ttft=0.5, token_delay=0.005, output_tokens=(150, 450))
    )
    output_dir: str = "runs/overhead"

    @field_validator("schedules")
    @classmethod
    def _schedules(cls, schedules: list[list[int]]) -> list[list[int]]:
        if not schedules or not all(schedules):
            raise ValueError("every schedule needs at least one round of at least 1 trajectory")
        return schedules

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """About a minute: 16 problems, ~1 s requests, no scaling, a small checkpoint run."""
        return {
            "problems": 16,
            "scaling": False,
            "emulator": EmulatorConfig(ttft=0.3, token_delay=0.004, output_tokens=(100, 400)),
        }


class Measurement(ClientCost):
    """One client's run of one workload (median over repeats), with what the emulator saw."""

    gc: GcSetting = "default"
    rounds: list[int]
    problems: int
    stream: bool
    requests: int
    tokens_out: int
    emulator_cpu_s: float
    peak_active: int
    wall_runs: list[float] = Field(default_factory=list, description="every repeat's wall time, in run order")
    cpu_runs: list[float] = Field(default_factory=list, description="every repeat's client CPU time")
    rss_runs: list[float] = Field(default_factory=list, description="every repeat's peak RSS (MB)")

    @property
    def cpu_ms_per_trajectory(self) -> float:
        return 1000 * self.cpu_s / max(self.trajectories, 1)

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.tokens_out / self.cpu_s if self.cpu_s > 0 else 0.0


class Pair(BaseModel):
    """A baseline (``floor``: the bare client, or the in-process operator for the endpoint row) and the
    client measured against it (``operator``: the operator, or the endpoint) on one workload; with
    ``--reference``, the reference pipeline on the same workload."""

    label: str
    floor: Measurement
    operator: Measurement
    reference: Measurement | None = None

    def versus_reference(self) -> dict[str, float] | None:
        """The operator's wall, CPU and peak RSS as multiples of the reference pipeline's."""
        ref = self.reference
        if ref is None:
            return None
        return {
            "wall": self.operator.wall_s / ref.wall_s,
            "cpu": self.operator.cpu_s / ref.cpu_s,
            "rss": self.operator.peak_rss_mb / ref.peak_rss_mb,
        }

    @property
    def wall_ratio(self) -> float:
        return self.operator.wall_s / self.floor.wall_s

    @property
    def cpu_ratio(self) -> float:
        return self.operator.cpu_s / self.floor.cpu_s if self.floor.cpu_s > 0 else float("inf")

    @property
    def stream_ratio(self) -> float:
        return self.operator.tokens_per_cpu_s / self.floor.tokens_per_cpu_s if self.floor.tokens_per_cpu_s else 0.0


class OverheadReport(BaseModel):
    settings: OverheadSettings
    schedules: list[Pair] = Field(default_factory=list)
    streaming: list[Pair] = Field(default_factory=list)
    checkpoint: Measurement | None = None
    proxy: list[Pair] = Field(default_factory=list)
    scaling_k: list[Pair] = Field(default_factory=list)
    scaling_problems: list[Pair] = Field(default_factory=list)
    profile_path: str | None = None
    profile_top: str | None = None


def schedule_label(rounds: list[int]) -> str:
    return "[" + ", ".join(str(k) for k in rounds) + "]"


def expected_trajectories(rounds: list[int], problems: int) -> int:
    """Trajectories a schedule sends without failures: every round plus the final round of 1."""
    return problems * (sum(rounds) + 1)


class WorkerFailed(RuntimeError):
    """A measured client process exited badly; its stderr tail says why."""


def gc_fields(setting: GcSetting) -> dict[str, Any]:
    """A worker spec's GC fields: the setting, and the threshold ``PaCoReConfig(spaced_gc=True)`` sets (the
    floor's and the reference's workers apply it themselves: they do not import pacore_graph)."""
    from pacore_graph.extend import SPACED_GC_FULL_PASS_THRESHOLD as FULL_PASS_THRESHOLD

    return {"gc": setting, "full_pass_threshold": FULL_PASS_THRESHOLD}


def run_worker(spec: WorkerSpec, timeout: float = 1800) -> WorkerResult:
    if spec.client == "reference":
        return _run_reference_worker(spec, timeout)
    completed = subprocess.run(worker_command(spec), capture_output=True, text=True, timeout=timeout)
    return worker_result(spec, completed)


def worker_command(spec: WorkerSpec) -> list[str]:
    """The command line of one worker run of this interpreter's client (operator, floor, proxy)."""
    return [sys.executable, "-m", "pacore_benchmarks.perf.overhead_worker", spec.model_dump_json()]


def _run_reference_worker(spec: WorkerSpec, timeout: float) -> WorkerResult:
    """The reference pipeline over the same problems (as its own JSONL input), under its own interpreter."""
    from pacore_benchmarks.perf.reference import WORKER

    assert spec.reference_python is not None, "a reference run needs the reference venv's interpreter"
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "problems.jsonl"
        rows = (json.dumps({"id": f"problem-{n}", "messages": m}) for n, m in enumerate(make_problems(spec.problems)))
        data.write_text("".join(row + "\n" for row in rows))
        fields = {"base_url", "model", "rounds", "concurrency", "stream", "seed", "gc", "full_pass_threshold"}
        worker_spec = {**spec.model_dump(include=fields), "data": str(data)}
        completed = subprocess.run(
            [spec.reference_python, str(WORKER), json.dumps(worker_spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return worker_result(spec, completed)


def worker_result(spec: WorkerSpec, completed: subprocess.CompletedProcess[str]) -> WorkerResult:
    """The result a worker printed last; ``WorkerFailed`` with the end of its stderr when it failed."""
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        raise WorkerFailed(
            f"the {spec.client} run of {schedule_label(spec.rounds)} over {spec.problems} problems failed "
            f"(exit {completed.returncode}): {completed.stderr.strip()[-2000:]}"
        )
    return WorkerResult.model_validate_json(lines[-1])


def _one_run(emu: Emulator, spec: WorkerSpec) -> tuple[WorkerResult, dict[str, Any]]:
    emu.reset()  # both clients get the same replies, and the counters are this run's alone
    result = run_worker(spec)
    return result, emu.stats()


def _median_measurement(spec: WorkerSpec, runs: list[tuple[WorkerResult, dict[str, Any]]]) -> Measurement:
    """The median-wall run's numbers, with the median CPU over all runs."""
    runs = sorted(runs, key=lambda run: run[0].wall_s)
    result, stats = runs[len(runs) // 2]
    cost = result.model_dump(include=set(ClientCost.model_fields))
    return Measurement(
        **{**cost, "client": spec.client, "cpu_s": statistics.median(run[0].cpu_s for run in runs)},
        gc=spec.gc,
        rounds=spec.rounds,
        problems=spec.problems,
        stream=spec.stream,
        requests=stats["requests"],
        tokens_out=stats["tokens_out"],
        emulator_cpu_s=stats["cpu_s"],
        peak_active=stats["peak_active"],
        wall_runs=[run[0].wall_s for run in runs],
        cpu_runs=[run[0].cpu_s for run in runs],
        rss_runs=[run[0].peak_rss_mb for run in runs],
    )


def measure(emu: Emulator, spec: WorkerSpec, repeats: int = 1) -> Measurement:
    """Run one client ``repeats`` times on a freshly reset emulator; median numbers."""
    return _median_measurement(spec, [_one_run(emu, spec) for _ in range(repeats)])


def compare(
    emu: Emulator,
    settings: OverheadSettings,
    rounds: list[int],
    problems: int,
    stream: bool,
    label: str | None = None,
    clients: tuple[ClientName, ClientName] = ("floor", "operator"),
    reference_python: str | None = None,
) -> Pair:
    """A baseline and a client (and, given its interpreter, the reference pipeline) on one workload,
    alternating run by run so a change in machine load hits each of them."""

    def spec(client: ClientName) -> WorkerSpec:
        return WorkerSpec(
            client=client,
            base_url=emu.base_url,
            model=emu.config.model,
            rounds=rounds,
            problems=problems,
            concurrency=settings.concurrency,
            stream=stream,
            reference_python=reference_python if client == "reference" else None,
            **gc_fields(settings.gc),
        )

    specs = [spec(clients[0])] + ([spec("reference")] if reference_python else []) + [spec(clients[1])]
    runs: list[list[tuple[WorkerResult, dict[str, Any]]]] = [[] for _ in specs]
    for _ in range(settings.repeats):
        for client_runs, client_spec in zip(runs, specs, strict=True):
            client_runs.append(_one_run(emu, client_spec))
    measured = [
        _median_measurement(client_spec, client_runs) for client_spec, client_runs in zip(specs, runs, strict=True)
    ]
    return Pair(
        label=label or schedule_label(rounds),
        floor=measured[0],
        operator=measured[-1],
        reference=measured[1] if reference_python else None,
    )


def plan(settings: OverheadSettings) -> list[tuple[str, dict[str, Any]]]:
    """Every step of the run in order, as (section, arguments): lets the progress bar know the total."""
    steps: list[tuple[str, dict[str, Any]]] = []
    for rounds in settings.schedules:
        steps.append(("schedules", {"rounds": rounds, "problems": settings.problems, "stream": False}))
    if settings.stream is True:
        for rounds in settings.schedules:
            steps.append(("streaming", {"rounds": rounds, "problems": settings.problems, "stream": True}))
    elif settings.stream is None:
        steps.append(("streaming", {"rounds": settings.stream_schedule, "problems": settings.problems, "stream": True}))
    if settings.checkpoint:
        problems = settings.checkpoint_problems or min(settings.problems, 16)
        steps.append(("checkpoint", {"rounds": [32, 4], "problems": problems}))
    if settings.proxy:
        steps.append(
            (
                "proxy",
                {
                    "rounds": settings.proxy_schedule,
                    "problems": settings.problems,
                    "stream": False,
                    "label": f"{schedule_label(settings.proxy_schedule)} via endpoint",
                    "clients": ("operator", "proxy"),
                },
            )
        )
    if settings.scaling:
        for k in settings.scaling_ks:
            steps.append(
                (
                    "scaling_k",
                    {"rounds": [k], "problems": settings.scaling_k_problems, "stream": False, "label": f"K={k}"},
                )
            )
        for problems in settings.scaling_problems:
            steps.append(
                ("scaling_problems", {"rounds": [4], "problems": problems, "stream": False, "label": f"P={problems}"})
            )
    if settings.profile:
        steps.append(("profile", {"rounds": [32, 4], "problems": settings.problems}))
    return steps


def run_overhead(settings: OverheadSettings, console: Any = None) -> OverheadReport:
    """Run every section against one emulator and return the report (nothing printed but progress)."""
    from pacore_graph.extend import RunProgress

    out_dir = Path(settings.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    emulator_config = settings.emulator.model_copy(update={"slots": settings.concurrency})
    report = OverheadReport(settings=settings)
    steps = plan(settings)
    reference_python = None
    if settings.reference is not None:
        from pacore_benchmarks.perf.reference import reference_python as install_reference

        if console is not None:
            console.print(f"reference pipeline: {settings.reference} (installed once into a scratch venv)")
        reference_python = install_reference(settings.reference)
    progress = RunProgress(console)
    progress.add("overhead", len(steps))
    with Emulator(emulator_config) as emu, progress:
        for section, args in steps:
            progress.advance("overhead", 0, note=f"{section} {schedule_label(args['rounds'])} P={args['problems']}")
            if section == "checkpoint":
                with tempfile.TemporaryDirectory() as tmp:
                    spec = WorkerSpec(
                        client="operator",
                        base_url=emu.base_url,
                        model=emu.config.model,
                        rounds=args["rounds"],
                        problems=args["problems"],
                        concurrency=settings.concurrency,
                        checkpoint=str(Path(tmp) / "checkpoints.db"),
                        **gc_fields(settings.gc),
                    )
                    report.checkpoint = measure(emu, spec)
            elif section == "profile":
                path = out_dir / "operator_profile.prof"
                spec = WorkerSpec(
                    client="operator",
                    base_url=emu.base_url,
                    model=emu.config.model,
                    rounds=args["rounds"],
                    problems=args["problems"],
                    concurrency=settings.concurrency,
                    profile=str(path),
                    **gc_fields(settings.gc),
                )
                measure(emu, spec)
                report.profile_path = str(path)
                report.profile_top = path.with_suffix(".txt").read_text()
            elif section in ("schedules", "streaming"):
                report_pairs = getattr(report, section)
                report_pairs.append(compare(emu, settings, **args, reference_python=reference_python))
            else:
                getattr(report, section).append(compare(emu, settings, **args))
            progress.advance("overhead")
    return report


def proxy_added_cpu_ms(pair: Pair) -> float:
    """What the endpoint adds per trajectory: its process's CPU (server and calling client) minus the in-process
    operator's, over the trajectories it ran."""
    return 1000 * (pair.operator.cpu_s - pair.floor.cpu_s) / max(pair.operator.trajectories, 1)


def _worst(values: list[float]) -> float | None:
    return max(values) if values else None


def summarise(report: OverheadReport) -> dict[str, Any]:
    """The machine-readable verdict: the JSON object printed last."""
    pairs = report.schedules
    op_cpu = sum(p.operator.cpu_s for p in pairs)
    floor_cpu = sum(p.floor.cpu_s for p in pairs)
    op_traj = sum(p.operator.trajectories for p in pairs)
    floor_traj = sum(p.floor.trajectories for p in pairs)
    stream_ratio = None
    if report.streaming:
        op_rate = sum(p.operator.tokens_out for p in report.streaming) / sum(p.operator.cpu_s for p in report.streaming)
        floor_rate = sum(p.floor.tokens_out for p in report.streaming) / sum(p.floor.cpu_s for p in report.streaming)
        stream_ratio = op_rate / floor_rate
    proxy = report.proxy[0] if report.proxy else None
    summary: dict[str, Any] = {
        "gc": gc_summary(report),
        "wall_ratio": _worst([p.wall_ratio for p in pairs]),
        "wall_ratios": {p.label: round(p.wall_ratio, 4) for p in pairs},
        "cpu_ratio": op_cpu / floor_cpu if floor_cpu else None,
        "cpu_ms_per_trajectory": 1000 * op_cpu / op_traj if op_traj else None,
        "floor_cpu_ms_per_trajectory": 1000 * floor_cpu / floor_traj if floor_traj else None,
        "stream_ratio": stream_ratio,
        "stream_tokens_per_core_s": {
            "operator": sum(p.operator.tokens_out for p in report.streaming)
            / max(sum(p.operator.cpu_s for p in report.streaming), 1e-9),
            "floor": sum(p.floor.tokens_out for p in report.streaming)
            / max(sum(p.floor.cpu_s for p in report.streaming), 1e-9),
        }
        if report.streaming
        else None,
        "peak_rss_mb": _worst([p.operator.peak_rss_mb for p in pairs]),
        "floor_peak_rss_mb": _worst([p.floor.peak_rss_mb for p in pairs]),
        "problems": report.settings.problems,
        "trajectories": op_traj,
        "expected_trajectories": sum(expected_trajectories(p.operator.rounds, p.operator.problems) for p in pairs),
        "floor_trajectories": floor_traj,
        "failures": sum(p.operator.failures for p in pairs),
        "checkpoint_bytes_per_problem": (report.checkpoint.checkpoint or {}).get("file_bytes_per_problem")
        if report.checkpoint
        else None,
        "proxy_wall_ratio": proxy.wall_ratio if proxy else None,
        "proxy_added_cpu_ms_per_trajectory": proxy_added_cpu_ms(proxy) if proxy else None,
    }
    from pacore_benchmarks.perf.overhead_report import cost_model

    summary.update(reference_summary(pairs))
    model = cost_model(report.scaling_k + report.scaling_problems)
    if model is not None:
        summary["operator_extra_ms_per_trajectory"] = round(model["extra_ms_per_trajectory"], 4)
        summary["operator_extra_ms_per_problem"] = round(model["extra_ms_per_problem"], 3)
    for key in (
        "wall_ratio",
        "cpu_ratio",
        "cpu_ms_per_trajectory",
        "floor_cpu_ms_per_trajectory",
        "stream_ratio",
        "peak_rss_mb",
        "floor_peak_rss_mb",
        "checkpoint_bytes_per_problem",
        "proxy_wall_ratio",
        "proxy_added_cpu_ms_per_trajectory",
    ):
        if isinstance(summary[key], float):
            summary[key] = round(summary[key], 4)
    targets = {}
    for name, (figure, _what, _unit, side, limit) in TARGET_FIGURES.items():
        value = _figure(summary, figure)
        if value is not None:  # a target whose figure was not measured (no streaming, no reference) is left out
            met = value <= limit if side == "<=" else value >= limit
            targets[name] = {"figure": figure, "value": value, "target": f"{side} {limit:g}", "met": met}
    summary["targets"] = targets
    summary["targets_met"] = all(target["met"] for target in targets.values())
    return summary


def _figure(summary: dict[str, Any], dotted: str) -> float | None:
    """A summary figure by its dotted name (``reference.worst.cpu``); None where it was not measured."""
    value: Any = summary
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float)) else None


def target_verdict(name: str, target: dict[str, Any]) -> str:
    """One target as a line: the figure, its value, and which side of the limit it is on,
    e.g. ``client CPU, operator / reference, worst schedule: 0.873x (target <= 0.8x: missed)``."""
    _figure_name, what, unit, side, limit = TARGET_FIGURES[name]
    return (
        f"{what}: {target['value']:.3f}{unit} (target {side} {limit:g}{unit}: {'met' if target['met'] else 'missed'})"
    )


def gc_summary(report: OverheadReport) -> dict[str, Any]:
    """The GC setting every client ran under, and per client the thresholds in force at most collections of
    its runs (the schedules' and streamed runs' medians). The operator sets its thresholds only while a run is
    in flight, so in a tiny run, where building the graph takes most collections, it shows CPython's."""
    from pacore_graph.extend import SPACED_GC_FULL_PASS_THRESHOLD as FULL_PASS_THRESHOLD

    seen: dict[str, list[tuple[int, ...]]] = {}
    pairs = report.schedules + report.streaming
    for side in [m for pair in pairs for m in (pair.floor, pair.reference, pair.operator) if m is not None]:
        if side.gc_thresholds is not None:
            seen.setdefault(side.client, []).append(tuple(side.gc_thresholds))
    thresholds = {client: list(statistics.mode(values)) for client, values in seen.items()}
    setting = report.settings.gc
    return {
        "setting": setting,
        "full_pass_threshold": FULL_PASS_THRESHOLD if setting == "spaced" else None,
        "thresholds": thresholds,
    }


def reference_summary(pairs: list[Pair]) -> dict[str, Any]:
    """The operator against the reference pipeline, per schedule and at worst (None when it did not run)."""
    versus = {pair.label: pair.versus_reference() for pair in pairs if pair.reference is not None}
    if not versus:
        return {"reference": None}
    measured = [pair for pair in pairs if pair.reference is not None]
    return {
        "reference": {
            "per_schedule": {
                label: {name: round(value, 4) for name, value in ratios.items()}
                for label, ratios in versus.items()
                if ratios is not None
            },
            "worst": {
                name: round(max(ratios[name] for ratios in versus.values() if ratios is not None), 4)
                for name in REFERENCE_TARGETS
            },
            "cpu_ms_per_trajectory": round(
                1000
                * sum(p.reference.cpu_s for p in measured if p.reference)
                / max(sum(p.reference.trajectories for p in measured if p.reference), 1),
                4,
            ),
        }
    }


def write_outputs(report: OverheadReport, summary: dict[str, Any]) -> Path:
    """Markdown, full JSON report and (when matplotlib is there) the scaling plot; returns the markdown path."""
    from pacore_benchmarks.perf.overhead_report import plot_scaling, render_markdown

    out_dir = Path(report.settings.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = plot_scaling(report, out_dir / "overhead_scaling.png")
    markdown = out_dir / "overhead.md"
    markdown.write_text(render_markdown(report, summary, plot))
    data = {"summary": summary, "report": json.loads(report.model_dump_json())}
    (out_dir / "overhead.json").write_text(json.dumps(data, indent=2) + "\n")
    return markdown
