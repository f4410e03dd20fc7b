"""Instructions per trajectory: a client's user-space instructions, counted by valgrind's cachegrind.

Why: on a shared 2-core machine the CPU time of the same run moves 15-20% from run to run, so telling a 3%
change from noise by ``pacore bench overhead`` takes dozens of alternating runs. The instructions a run
executes repeat to about 1%: three runs of each side settle it.

How: the overhead benchmark's worker (``overhead_worker``) runs under cachegrind twice per measurement, over
``small`` and over ``large`` problems of the same schedule against one emulator. The small run is subtracted
from the large one, which removes imports and start-up, and the difference is divided by the trajectories
between them. With a ``baseline`` (another checkout of this project, an older commit say) its code runs the
same way, alternating with this one's, under the same interpreter and libraries, and each figure is given as
a ratio to the baseline's.

What it does not see: time in the kernel (socket calls), time waiting, and cache misses. A change that moves
work into or out of system calls needs the CPU figures of ``pacore bench overhead`` as well.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.overhead import worker_command, worker_result
from pacore_benchmarks.perf.overhead_worker import ClientName, WorkerSpec
from pacore_emulator import Emulator, EmulatorConfig

# a checkout's folder -> the package name it is installed under (pyproject.toml's package-dir)
PACKAGES = {
    "pacore_graph": "pacore_graph",
    "agents": "pacore_agents",
    "benchmarks": "pacore_benchmarks",
    "emulator": "pacore_emulator",
}
CLIENTS: tuple[ClientName, ...] = ("operator", "floor")  # the clients that run in this interpreter
_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")


class InstructionSettings(BenchSettings):
    """What to count. ``quick`` fills in a smaller run."""

    clients: list[ClientName] = Field(default_factory=lambda: list(CLIENTS))
    rounds: list[int] = Field(default_factory=lambda: [32, 4])
    problems: tuple[int, int] = Field((2, 16), description="the small and the large run's problems")
    repeats: int = Field(3, ge=1, description="measurements per client and side; the median is reported")
    concurrency: int = Field(1024, ge=1)
    baseline: str | None = Field(None, description="another checkout of pacore-graph, run side by side")
    emulator: EmulatorConfig = Field(
        default_factory=lambda: EmulatorConfig(ttft=0.3, token_delay=0.004, output_tokens=(100, 400))
    )

    @field_validator("clients")
    @classmethod
    def _clients(cls, clients: list[ClientName]) -> list[ClientName]:
        if not clients or any(client not in CLIENTS for client in clients):
            raise ValueError("clients: operator and/or floor (the other clients run outside this interpreter)")
        return clients

    @field_validator("rounds")
    @classmethod
    def _rounds(cls, rounds: list[int]) -> list[int]:
        if not rounds or min(rounds) < 1:
            raise ValueError("rounds: at least one round of at least 1 trajectory")
        return rounds

    @model_validator(mode="after")
    def _sizes(self) -> InstructionSettings:
        small, large = self.problems
        if not 1 <= small < large:
            raise ValueError(
                f"problems: the small run must have at least 1 and fewer than the large one, got {small},{large}"
            )
        return self

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """A few minutes: [8, 2] over 1 and 4 problems, measured once."""
        return {"rounds": [8, 2], "problems": (1, 4), "repeats": 1}


class Count(BaseModel):
    """One worker run under cachegrind."""

    instructions: int
    trajectories: int


class Measurement(BaseModel):
    """One client of one side: the small and the large run, and what lies between them."""

    side: str
    client: str
    small: Count
    large: Count

    @property
    def per_trajectory(self) -> float:
        between = self.large.trajectories - self.small.trajectories
        return (self.large.instructions - self.small.instructions) / between


class ClientFigure(BaseModel):
    """The median of a client's measurements on one side, and their spread."""

    side: str
    client: str
    per_trajectory: float
    runs: list[float]

    @property
    def spread(self) -> float:
        """The runs' range as a fraction of their median."""
        return (max(self.runs) - min(self.runs)) / self.per_trajectory


class InstructionReport(BaseModel):
    settings: InstructionSettings
    figures: list[ClientFigure]

    def figure(self, side: str, client: str) -> ClientFigure | None:
        return next((f for f in self.figures if f.side == side and f.client == client), None)

    def ratios(self) -> dict[str, float]:
        """Each client's instructions per trajectory, this checkout's over the baseline's."""
        ratios: dict[str, float] = {}
        for client in self.settings.clients:
            mine, theirs = self.figure("this", client), self.figure("baseline", client)
            if mine is not None and theirs is not None:
                ratios[client] = mine.per_trajectory / theirs.per_trajectory
        return ratios

    def operator_over_floor(self) -> dict[str, float]:
        """Each side's operator over its floor: what the operator adds to the leanest client, as a multiple."""
        ratios = {}
        for side in dict.fromkeys(f.side for f in self.figures):
            operator, floor = self.figure(side, "operator"), self.figure(side, "floor")
            if operator is not None and floor is not None:
                ratios[side] = round(operator.per_trajectory / floor.per_trajectory, 4)
        return ratios


def check_valgrind() -> str:
    """valgrind's path; a one-line error when it is not installed (before anything starts)."""
    found = shutil.which("valgrind")
    if found is None:
        raise ValueError("valgrind is not installed (Debian: apt-get install valgrind): it counts the instructions")
    return found


def check_baseline(path: str) -> Path:
    """The baseline checkout, refused with one line when it is not a checkout of this project."""
    root = Path(path).expanduser().resolve()
    missing = [name for name in (*PACKAGES, "benchmarks/perf/overhead_worker.py") if not (root / name).exists()]
    if missing:
        raise ValueError(f"--baseline {path}: not a pacore-graph checkout (no {', '.join(missing)})")
    return root


@contextmanager
def importable(checkout: Path) -> Iterator[str]:
    """A folder to put first on PYTHONPATH so that the checkout's packages are imported under their installed
    names (``benchmarks`` as ``pacore_benchmarks``, ...)."""
    with tempfile.TemporaryDirectory(prefix="pacore-baseline-") as folder:
        for directory, package in PACKAGES.items():
            (Path(folder) / package).symlink_to(checkout / directory, target_is_directory=True)
        yield folder


def count(spec: WorkerSpec, valgrind: str, pythonpath: str | None, timeout: float = 1800) -> Count:
    """One worker run under cachegrind: its instructions (the whole process) and its trajectories."""
    env = None
    if pythonpath is not None:  # first, before whatever the caller's PYTHONPATH holds (both sides keep that)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (pythonpath, os.environ.get("PYTHONPATH"))))}
    with tempfile.TemporaryDirectory(prefix="pacore-cachegrind-") as folder:
        cachegrind = [valgrind, "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={folder}/out"]
        completed = subprocess.run(
            [*cachegrind, *worker_command(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=folder,  # not the caller's folder: a pacore_graph there would be imported instead
        )
    result = worker_result(spec, completed)
    total = _TOTAL.search(completed.stderr)
    if total is None:
        raise RuntimeError(f"valgrind printed no instruction count: {completed.stderr.strip()[-2000:]}")
    if result.failures:
        raise RuntimeError(f"the {spec.client} run over {spec.problems} problems had {result.failures} failed requests")
    return Count(instructions=int(total.group(1).replace(",", "")), trajectories=result.trajectories)


def run_instructions(
    settings: InstructionSettings, on_run: Callable[[str, int], None] | None = None
) -> InstructionReport:
    """Every measurement, the sides alternating (this checkout first in odd repeats, the baseline first in even
    ones), each client's small and large run back to back against one emulator. ``on_run(note, done)`` hears of
    each run as it starts (``done`` 0) and as it ends (``done`` 1)."""
    valgrind = check_valgrind()
    baseline = check_baseline(settings.baseline) if settings.baseline is not None else None
    emulator = Emulator(settings.emulator.model_copy(update={"slots": settings.concurrency}))
    baseline_path = importable(baseline) if baseline is not None else nullcontext(None)
    measurements: list[Measurement] = []
    with emulator as emu, baseline_path as pythonpath:
        runner = _Runner(emu, settings, valgrind, on_run)
        sides: list[tuple[str, str | None]] = [("this", None)]
        if pythonpath is not None:
            sides.append(("baseline", pythonpath))
        for repeat in range(settings.repeats):
            for side, path in sides if repeat % 2 == 0 else sides[::-1]:
                measurements += [runner.measure(side, path, client, repeat) for client in settings.clients]
    return InstructionReport(settings=settings, figures=figures_of(measurements))


class _Runner:
    """Worker runs under cachegrind against one emulator, every run with the same replies."""

    def __init__(
        self,
        emu: Emulator,
        settings: InstructionSettings,
        valgrind: str,
        on_run: Callable[[str, int], None] | None,
    ):
        self.emu = emu
        self.settings = settings
        self.valgrind = valgrind
        self.on_run = on_run or (lambda note, done: None)

    def measure(self, side: str, pythonpath: str | None, client: ClientName, repeat: int) -> Measurement:
        small, large = (self._count(side, pythonpath, client, problems, repeat) for problems in self.settings.problems)
        return Measurement(side=side, client=client, small=small, large=large)

    def _count(self, side: str, pythonpath: str | None, client: ClientName, problems: int, repeat: int) -> Count:
        note = f"{side}: {client}, {problems} problems (measurement {repeat + 1})"
        self.on_run(note, 0)
        self.emu.reset()
        settings = self.settings
        spec = WorkerSpec(
            client=client,
            base_url=self.emu.base_url,
            model=self.emu.config.model,
            rounds=settings.rounds,
            problems=problems,
            concurrency=settings.concurrency,
        )
        counted = count(spec, self.valgrind, pythonpath)
        self.on_run(note, 1)
        return counted


def figures_of(measurements: list[Measurement]) -> list[ClientFigure]:
    """Each side and client's median over its measurements."""
    keys = dict.fromkeys((m.side, m.client) for m in measurements)
    figures = []
    for side, client in keys:
        runs = [m.per_trajectory for m in measurements if (m.side, m.client) == (side, client)]
        figures.append(ClientFigure(side=side, client=client, per_trajectory=statistics.median(runs), runs=runs))
    return figures


def runs_needed(settings: InstructionSettings) -> int:
    return settings.repeats * len(settings.clients) * 2 * (2 if settings.baseline is not None else 1)
