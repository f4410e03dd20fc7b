"""The reliability scenarios of ``pacore bench faults``: a flaky server costs retries, a kill costs nothing done.

Fault scenario: N problems with schedule [16] against the emulator injecting HTTP 500s, dropped
connections and hung requests (timeouts). Every problem must be answered, every trajectory completed or
recorded as failed with its reason, and no result duplicated.

Resume scenario: the same kind of run in a subprocess (``faults_worker``), first clean, then killed with
SIGKILL while a problem is half done and started again on the same output folder. Requests are counted
at the emulator: the restarted run must send exactly the trajectories that were not saved (finished
problems and finished trajectories of the problems in flight are not redone), and its rows must equal the
clean run's in count and ids.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.faults_worker import (
    RESULTS_FILE,
    fingerprint,
    result_row,
    scenario_config,
    synthetic_problems,
)
from pacore_emulator import Emulator, EmulatorConfig, FaultRates
from pacore_graph import RunFolder
from pacore_graph.extend import ResultsFile, open_checkpointer
from pacore_graph.models import OpenAICompatibleChatModel


class FaultSettings(BenchSettings):
    problems: int = Field(64, ge=1)
    rounds: list[int] = Field(default_factory=lambda: [16])
    faults: FaultRates = Field(default_factory=lambda: FaultRates(http_500=0.05, drop=0.02, timeout=0.01))
    request_timeout: float = Field(2.0, description="client timeout; a hung request costs this much")
    max_concurrency: int = 128
    resume_problems: int = Field(8, ge=1)
    resume_rounds: list[int] = Field(default_factory=lambda: [16])

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        return {"problems": 16, "resume_problems": 4}


class FaultReport(BaseModel):
    problems: int
    answered: int
    duplicates: int
    lost: int = Field(description="problems without a row plus trajectories neither completed nor failed")
    trajectories: int
    failed_trajectories: int
    failure_reasons: dict[str, int]
    retries: int
    requests: int
    faults_injected: dict[str, int]
    seconds: float


class ResumeReport(BaseModel):
    problems: int
    clean_requests: int
    rows_before_kill: int
    completed_before_kill: int = Field(description="requests the emulator had answered when the run died")
    saved_trajectories: int = Field(description="trajectories on disk at the kill (rows + checkpoints)")
    saved_in_flight: int = Field(description="finished trajectories of problems in flight, kept by checkpoints")
    cut_by_kill: int = Field(description="requests in flight at the kill; these must be sent again")
    resume_requests: int
    expected_resume_requests: int
    redone: int = Field(description="answered-before-kill trajectories sent again (should be 0)")
    rows: int
    ids_equal_clean: bool
    duplicates: int
    torn_lines: int
    resume_summary: dict[str, Any]
    resumed_ok: bool
    seconds: float


# --------------------------------------------------------------------------------------------- faults


async def run_fault_scenario(settings: FaultSettings, folder: Path) -> FaultReport:
    started = time.monotonic()
    emulator_config = EmulatorConfig(
        ttft=0.02, token_delay=0.001, output_tokens=(32, 160), faults=settings.faults, hang_seconds=60.0
    )
    config = scenario_config(
        settings.rounds, max_concurrency=settings.max_concurrency, request_timeout=settings.request_timeout
    )
    problems = synthetic_problems(settings.problems)
    with Emulator(emulator_config) as emulator:
        model = OpenAICompatibleChatModel(base_url=emulator.base_url, model=emulator_config.model)
        try:
            async with RunFolder(folder, fingerprint=fingerprint(emulator_config.model, config), progress=False) as run:
                await run.run(model, config, problems, result_row, salt=[emulator_config.model])
        finally:
            await model.aclose()
        stats = emulator.stats()
    return check_fault_rows(settings, folder / RESULTS_FILE, stats, time.monotonic() - started)


def check_fault_rows(settings: FaultSettings, results: Path, stats: dict[str, Any], seconds: float) -> FaultReport:
    """Every problem answered, every trajectory accounted for, nothing twice."""
    rows = _read_rows(results)
    ids = Counter(row["id"] for row in rows)
    expected_ids = {problem.id for problem in synthetic_problems(settings.problems)}
    duplicates = sum(count - 1 for count in ids.values())
    lost = len(expected_ids - set(ids))
    trajectories = failed = retries = 0
    reasons: Counter[str] = Counter()
    schedule = [*settings.rounds, 1]
    for row in rows:
        for round_row, k in zip(row["rounds"], schedule, strict=False):
            indices = Counter(t["index"] for t in round_row["trajectories"])
            duplicates += sum(count - 1 for count in indices.values())
            lost += len(set(range(k)) - set(indices))
            for t in round_row["trajectories"]:
                trajectories += 1
                retries += t["attempts"] - 1
                if t["error"]:
                    failed += 1
                    reasons[t["error_type"]] += 1
                elif t["finish_reason"] is None:
                    lost += 1  # neither completed nor failed with a reason
    answered = sum(1 for row in rows if row["id"] in expected_ids and row["answer"].strip())
    return FaultReport(
        problems=settings.problems,
        answered=answered,
        duplicates=duplicates,
        lost=lost,
        trajectories=trajectories,
        failed_trajectories=failed,
        failure_reasons=dict(reasons),
        retries=retries,
        requests=stats["requests"],
        faults_injected=stats["faults"],
        seconds=round(seconds, 1),
    )


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file, duplicates included (ResultsFile itself would hide nothing, but
    counting lines is the independent check)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------- resume


def _worker_command(emulator: Emulator, folder: Path, settings: FaultSettings) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pacore_benchmarks.perf.faults_worker",
        "--base-url",
        emulator.base_url,
        "--model",
        emulator.config.model,
        "--output",
        str(folder),
        "--problems",
        str(settings.resume_problems),
        "--rounds",
        ",".join(map(str, settings.resume_rounds)),
        "--problems-in-flight",
        "2",
        "--request-timeout",
        str(settings.request_timeout * 5),
    ]


def _run_worker(command: list[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the worker failed (exit {done.returncode}): {done.stderr[-2000:] or done.stdout[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _complete_lines(path: Path) -> int:
    if not path.exists():
        return 0
    return path.read_bytes().count(b"\n")


def _kill_mid_problem(
    command: list[str], emulator: Emulator, folder: Path, per_problem: int, timeout: float
) -> dict[str, Any]:
    """Start the worker and SIGKILL it once a problem is written, another is partly done, and every trajectory
    the emulator has answered is on disk (in a row or in the checkpoints): the moment is read from the folder,
    not guessed from a pause. Requests still in flight are cut by the kill and must be sent again."""
    log = folder.with_name(f"{folder.name}.worker.log")  # beside the run folder: not a file of its own
    folder.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the worker ended before it could be killed; see {log}")
            rows = _complete_lines(folder / RESULTS_FILE)
            stats = emulator.stats()  # read before the folder: what it counts, the folder must hold
            partly_done = stats["completed"] - rows * per_problem
            if rows >= 1 and partly_done >= 3 and stats["active"] > 0:
                on_disk = trajectories_on_disk(folder, per_problem)
                # no answer came while the folder was read: the kill cuts only requests still unanswered
                if on_disk >= stats["completed"] == emulator.stats()["completed"]:
                    process.send_signal(signal.SIGKILL)
                    process.wait()
                    return {"rows": rows, "stats": stats}
            time.sleep(0.02)
        raise RuntimeError("no moment to kill the worker came before the timeout")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def trajectories_on_disk(folder: Path, per_problem: int) -> int:
    """Trajectories a run of the worker's folder would not send again: ``per_problem`` for every problem with a
    row, plus what the checkpoints hold of the others (:func:`saved_trajectories`)."""
    written = {row["id"] for row in _read_rows(folder / RESULTS_FILE)}
    return len(written) * per_problem + asyncio.run(saved_trajectories(folder, written))


async def saved_trajectories(folder: Path, written: set[str]) -> int:
    """Trajectories of unwritten problems that the checkpoints hold: each finished trajectory's record is one
    write to the PaCoRe graph's ``trajectories`` channel, saved as it finished (LangGraph's pending writes).
    Every checkpoint namespace counts: a PaCoRe graph run as a subgraph checkpoints under its node's."""
    saved: set[tuple[str, str, int, int]] = set()
    async with open_checkpointer(folder) as saver:
        async for item in saver.alist(None):
            thread, namespace = item.config["configurable"]["thread_id"], item.config["configurable"]["checkpoint_ns"]
            if thread.split(":", 1)[0] in written:
                continue
            for _, channel, value in item.pending_writes or []:
                if channel == "trajectories" and isinstance(value, list):  # `begin`'s reset is an Overwrite
                    saved.update((thread, namespace, record["round_index"], record["index"]) for record in value)
    return len(saved)


def run_resume_scenario(settings: FaultSettings, folder: Path) -> ResumeReport:
    started = time.monotonic()
    per_problem = sum(settings.resume_rounds) + 1
    emulator_config = EmulatorConfig(ttft=0.02, token_delay=0.003, output_tokens=(20, 500))
    timeout = 60 + 10 * settings.resume_problems
    with Emulator(emulator_config) as emulator:
        clean_folder, killed_folder = folder / "clean", folder / "killed"
        _run_worker(_worker_command(emulator, clean_folder, settings), timeout)
        clean_requests = emulator.stats()["requests"]

        emulator.reset()
        command = _worker_command(emulator, killed_folder, settings)
        _kill_mid_problem(command, emulator, killed_folder, per_problem, timeout)
        before = emulator.stats()
        written = {row["id"] for row in _read_rows(killed_folder / RESULTS_FILE)}
        saved = trajectories_on_disk(killed_folder, per_problem)
        in_flight = saved - len(written) * per_problem

        emulator.reset()
        summary = _run_worker(command, timeout)
        resume_requests = emulator.stats()["requests"]

    clean_rows, rows = _read_rows(clean_folder / RESULTS_FILE), _read_rows(killed_folder / RESULTS_FILE)
    ids = Counter(row["id"] for row in rows)
    torn = ResultsFile(killed_folder / RESULTS_FILE, key=lambda row: row["id"]).torn_lines
    expected = clean_requests - saved
    redone = max(0, before["completed"] - saved)
    ids_equal = sorted(ids) == sorted(row["id"] for row in clean_rows) and len(rows) == len(clean_rows)
    duplicates = sum(count - 1 for count in ids.values())
    ok = (
        resume_requests == expected
        and redone == 0
        and in_flight > 0
        and ids_equal
        and duplicates == 0
        and torn == 0
        and len(rows) == settings.resume_problems
    )
    return ResumeReport(
        problems=settings.resume_problems,
        clean_requests=clean_requests,
        rows_before_kill=len(written),
        completed_before_kill=before["completed"],
        saved_trajectories=saved,
        saved_in_flight=in_flight,
        cut_by_kill=before["requests"] - before["completed"],
        resume_requests=resume_requests,
        expected_resume_requests=expected,
        redone=redone,
        rows=len(rows),
        ids_equal_clean=ids_equal,
        duplicates=duplicates,
        torn_lines=torn,
        resume_summary=summary,
        resumed_ok=ok,
        seconds=round(time.monotonic() - started, 1),
    )


def final_summary(faults: FaultReport, resume: ResumeReport) -> dict[str, Any]:
    """The one JSON object ``pacore bench faults`` prints last."""
    return {
        "problems": faults.problems,
        "answered": faults.answered,
        "duplicates": faults.duplicates + resume.duplicates,
        "lost": faults.lost + (resume.problems - resume.rows),
        "resumed_ok": resume.resumed_ok,
        "failed_trajectories": faults.failed_trajectories,
        "retries": faults.retries,
        "faults_injected": faults.faults_injected,
        "resume_requests": resume.resume_requests,
        "expected_resume_requests": resume.expected_resume_requests,
        "saved_in_flight": resume.saved_in_flight,
    }
