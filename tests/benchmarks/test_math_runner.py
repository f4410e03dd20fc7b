"""The math benchmark runner on a deterministic fake model: side-by-side methods on the same draws, TTC
accounting, outputs, and resume (after failures, and after SIGKILL in the middle of a PaCoRe round)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from waits import still_running, wait_until

from pacore_benchmarks.math.data import load_problems
from pacore_benchmarks.math.runner import MathBenchmark, MathRunSettings
from pacore_benchmarks.perf.faults import saved_trajectories
from pacore_graph.extend import ModelRequestError, SettingsMismatch, Trajectory, message_text

ROOT = Path(__file__).resolve().parents[2]
AIME = ROOT / "tests" / "fixtures" / "math" / "aime_2025.jsonl"
POOL_TOKENS = 50
SYNTH_TOKENS = 20


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class FakeMathExplorer:
    """Replies are a function of (prompt, round, index), never of call order.

    Round 0: thinks, then boxes the gold answer for 60% of (prompt, index) pairs and one of two wrong
    answers otherwise. Later rounds box the most common boxed answer among the references in their prompt.
    ``block`` = (round, index) makes that trajectory hang (to be killed mid-round); ``fail_synthesis``
    makes every later-round call fail with a non-retryable HTTP 400.
    """

    def __init__(
        self,
        data: Path,
        *,
        log: Path | None = None,
        block: tuple[int, int] | None = None,
        fail_synthesis: bool = False,
        delay: float = 0.0,
    ):
        self.golds = {p.problem: p.answer for p in load_problems(data)}
        self.model = SimpleNamespace(model="fake-math")
        self.log = log
        self.block = block
        self.fail_synthesis = fail_synthesis
        self.delay = delay
        self.calls: Counter = Counter()

    def _note(self, event: str, round_index: int, index: int, key: str) -> None:
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(json.dumps({"event": event, "round": round_index, "index": index, "key": key}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    async def explore(self, messages, episode) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        text = message_text(messages[-1])
        key = f"{_digest(text):08x}"
        self.calls[(round_index, index)] += 1
        self._note("start", round_index, index, key)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.block == (round_index, index):
            await asyncio.Event().wait()
        if round_index == 0:
            gold = next(g for problem, g in self.golds.items() if problem in text)
            roll = _digest(f"{text}|{index}") % 10
            answer = gold if roll < 6 else str(int(gold) + 1 + roll % 2)
            content = f"<think>working on it #{index}</think>So the answer is $\\boxed{{{answer}}}$."
            tokens = POOL_TOKENS + index
        else:
            if self.fail_synthesis:
                raise ModelRequestError("HTTP 400: context overflow (fake)", status=400, retryable=False)
            boxed = re.findall(r"\\boxed\{(\d+)\}", text)
            answer = Counter(boxed).most_common(1)[0][0] if boxed else "0"
            content = f"<think>comparing references</think>Final: \\boxed{{{answer}}}"
            tokens = SYNTH_TOKENS
        self._note("finish", round_index, index, key)
        return Trajectory(content=content, completion_tokens=tokens, prompt_tokens=10, finish_reason="stop")


def _settings(output: Path, **overrides) -> MathRunSettings:
    fields = dict(data=str(AIME), output=output, limit=3, schedules=[[4], [8, 2]], samples=2)
    fields.update(overrides)
    return MathRunSettings(**fields)


def _rows(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines() if line.strip()]


def test_methods_side_by_side_with_exact_ttc(tmp_path: Path) -> None:
    explorer = FakeMathExplorer(AIME)
    settings = _settings(tmp_path / "run")
    assert settings.pool_size == 8 and settings.effective_vote_ks == [4, 8]
    report = asyncio.run(MathBenchmark(settings, explorer, progress=False).arun())
    assert not report.failures
    rows = _rows(tmp_path / "run")
    labels = Counter(row["label"] for row in rows)
    assert labels == {"single": 24, "vote@4": 6, "vote@8": 6, "pacore[4]": 6, "pacore[8,2]": 6}
    # the pool was generated once: 8 per problem; synthesis calls: [4] -> 1, [8,2] -> 2 + 1 per run
    assert sum(n for (r, _), n in explorer.calls.items() if r == 0) == 24
    assert sum(n for (r, _), n in explorer.calls.items() if r > 0) == 3 * 2 * (1 + 3)
    pool = {(r["problem_id"], r["index"]): r for r in map(json.loads, (tmp_path / "run/pool.jsonl").open())}
    for row in rows:
        pooled = sum(pool[(row["problem_id"], i)]["completion_tokens"] for i in row["pool_indices"])
        if row["label"] == "pacore[4]":
            assert row["ttc"] == pooled + SYNTH_TOKENS
        elif row["label"] == "pacore[8,2]":
            assert row["ttc"] == pooled + 3 * SYNTH_TOKENS
            assert row["round_tokens"] == [pooled, 2 * SYNTH_TOKENS, SYNTH_TOKENS]
        else:
            assert row["ttc"] == pooled
    # paired comparison: PaCoRe [4] sample s starts from exactly vote@4 sample s's trajectories
    by_key = {(r["label"], r["problem_id"], r["sample"]): r for r in rows}
    for (label, problem_id, sample), row in by_key.items():
        if label == "pacore[4]":
            assert row["pool_indices"] == by_key[("vote@4", problem_id, sample)]["pool_indices"]
    # the fake's synthesis boxes the references' majority: PaCoRe [4] is right exactly when vote@4 is
    # right without a tie (a 2-2 tie goes to the first reference in template order, the vote to the first draw)
    for (label, problem_id, sample), row in by_key.items():
        vote = by_key[("vote@4", problem_id, sample)] if label == "pacore[4]" else None
        if vote is not None and vote["votes"] >= 3:
            assert row["correct"] == vote["correct"]
    # single's accuracy is the pool's pass rate
    single = next(p for p in report.points if p.label == "single")
    pass_rate = sum(r["correct"] for r in pool.values()) / len(pool)
    assert single.accuracy == pytest.approx(pass_rate)
    assert single.ttc == pytest.approx(sum(r["completion_tokens"] for r in pool.values()) / len(pool))
    # outputs
    assert (tmp_path / "run/curve.png").stat().st_size > 10_000
    table = (tmp_path / "run/table.md").read_text()
    assert "| low [4] |" in table and "| [8, 2] |" in table and "vote@8" in table and "hmmt" not in table
    assert "| aime_2025_I_1 |" in table
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert len(summary["points"]) == 5 and summary["complete_problems"] == 3


def test_the_first_sample_shuffles_references_with_the_reference_pipelines_seed(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "run")
    assert [settings.pacore_config([4], sample).seed for sample in (0, 1)] == [42, 43]  # Exp.random_seed = 42
    assert _settings(tmp_path / "other", seed=1).pacore_config([4], 0).seed == 42 + 1_000_003


def test_failures_are_reported_and_the_rerun_redoes_only_them(tmp_path: Path) -> None:
    output = tmp_path / "run"
    broken = FakeMathExplorer(AIME, fail_synthesis=True)
    first = asyncio.run(MathBenchmark(_settings(output), broken, progress=False).arun())
    assert len(first.failures) == 12 and all("400" in f.error for f in first.failures)
    assert {f.label for f in first.failures} == {"pacore[4]", "pacore[8,2]"}
    kept = _rows(output)
    assert Counter(r["method"] for r in kept) == {"single": 24, "vote": 12}  # what was computed is kept

    healthy = FakeMathExplorer(AIME)
    second = asyncio.run(MathBenchmark(_settings(output), healthy, progress=False).arun())
    assert not second.failures
    assert sum(n for (r, _), n in healthy.calls.items() if r == 0) == 0  # the pool was reused
    rows = _rows(output)
    assert rows[: len(kept)] == kept
    clean = tmp_path / "clean"
    asyncio.run(MathBenchmark(_settings(clean), FakeMathExplorer(AIME), progress=False).arun())
    keys = sorted((r["label"], r["problem_id"], r["sample"]) for r in rows)
    assert keys == sorted((r["label"], r["problem_id"], r["sample"]) for r in _rows(clean))
    assert len(set(keys)) == len(keys)
    assert [(r["label"], r["correct"], r["ttc"]) for r in sorted(rows, key=str)] == [
        (r["label"], r["correct"], r["ttc"]) for r in sorted(_rows(clean), key=str)
    ]


def test_a_folder_refuses_results_made_with_other_settings(tmp_path: Path) -> None:
    output = tmp_path / "run"
    asyncio.run(MathBenchmark(_settings(output, methods=["single"]), FakeMathExplorer(AIME), progress=False).arun())
    with pytest.raises(SettingsMismatch, match="pool_size: folder has 2, this run 8"):
        asyncio.run(MathBenchmark(_settings(output), FakeMathExplorer(AIME), progress=False).arun())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pool": 2}, "--pool 2 is too small"),
        ({"schedules": [[4, 0]]}, "at least 1 trajectory"),
        ({"schedules": [[]]}, "single plain call"),
        ({"methods": []}, "at least one"),
    ],
)
def test_bad_settings_get_one_clear_message(tmp_path: Path, overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _settings(tmp_path, **overrides)


KILL_SCRIPT = """
import asyncio, os, sys
from pathlib import Path
sys.path[:0] = [{tests!r}, str(Path({tests!r}).parent)]  # this folder, and the suite's helpers (waits)
from test_math_runner import AIME, FakeMathExplorer, _settings
from pacore_benchmarks.math.runner import MathBenchmark
block = (1, 1) if os.environ["PHASE"] == "1" else None
explorer = FakeMathExplorer(AIME, log=Path(os.environ["CALLS"]), block=block)
settings = _settings(Path(os.environ["OUT"]), limit=1, samples=1, schedules=[[4, 2]], methods=["pacore"])
report = asyncio.run(MathBenchmark(settings, explorer, progress=False).arun())
print("failures", len(report.failures))
"""


def _calls(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def saved_all(output: Path, calls: list[dict]) -> bool:
    """Every trajectory the explorer finished is in the checkpoint (pool trajectories included: round 1 of
    the PaCoRe run is made of them)."""
    return asyncio.run(saved_trajectories(output, set())) >= sum(c["event"] == "finish" for c in calls)


def test_sigkill_mid_round_resumes_without_redoing_finished_trajectories(tmp_path: Path) -> None:
    """Kill -9 while round 2 has one trajectory done and one in flight; the restart redoes only the latter."""
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT.format(tests=str(Path(__file__).parent)))
    output, first_calls, second_calls = tmp_path / "out", tmp_path / "calls1.jsonl", tmp_path / "calls2.jsonl"
    env = {**os.environ, "OUT": str(output), "PHASE": "1", "CALLS": str(first_calls)}
    process = subprocess.Popen([sys.executable, str(script)], env=env, cwd=ROOT)
    try:

        def one_saved_one_blocked() -> bool:  # round 2's first trajectory finished and saved, the second blocked
            calls = _calls(first_calls)
            events = {(c["event"], c["round"], c["index"]) for c in calls}
            done = {("finish", 1, 0), ("start", 1, 1)} <= events and saved_all(output, calls)
            return still_running(process, "the run") and done

        wait_until(one_saved_one_blocked, 120, what="round 2 with one trajectory saved and one blocked", every=0.1)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert not (output / "results.jsonl").exists() or not _rows(output)
    pooled = len((output / "pool.jsonl").read_text().splitlines())
    assert pooled == 4

    env.update(PHASE="2", CALLS=str(second_calls))
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failures 0" in done.stdout
    redone = [(c["round"], c["index"]) for c in _calls(second_calls) if c["event"] == "start"]
    assert redone == [(1, 1), (2, 0)], redone  # no pool call, no repeat of round 2's finished trajectory
    (row,) = _rows(output)
    assert row["label"] == "pacore[4,2]" and row["round_tokens"] == [
        row["ttc"] - 3 * SYNTH_TOKENS,
        2 * SYNTH_TOKENS,
        SYNTH_TOKENS,
    ]


class _FlakyExplorer(FakeMathExplorer):
    """Fails the first attempt of pool trajectory 1 with a retryable 503, or every call with ``status``."""

    def __init__(self, data: Path, status: int | None = None):
        super().__init__(data)
        self.status = status

    async def explore(self, messages, episode) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        if self.status is not None:
            raise ModelRequestError(f"HTTP {self.status}: model 'nope' does not exist", status=self.status)
        if round_index == 0 and index == 1 and self.calls[(0, 1)] == 0:
            self.calls[(0, 1)] += 1
            raise ModelRequestError("HTTP 503: busy", status=503, retryable=True)
        return await super().explore(messages, episode)


def test_transient_errors_cost_retries_not_answers(tmp_path: Path) -> None:
    explorer = _FlakyExplorer(AIME)
    settings = _settings(tmp_path / "run", limit=1, samples=1, schedules=[[2]])
    report = asyncio.run(MathBenchmark(settings, explorer, progress=False).arun())
    assert not report.failures
    assert explorer.calls[(0, 1)] == 2  # one failed attempt, one retry
    pool = [json.loads(line) for line in (tmp_path / "run/pool.jsonl").read_text().splitlines()]
    assert [row["attempts"] for row in pool] == [1, 2]


def test_a_refused_request_stops_the_run_with_one_message(tmp_path: Path) -> None:
    from pacore_benchmarks.math.runner import RunAborted

    settings = _settings(tmp_path / "run", samples=1, schedules=[[2]])
    with pytest.raises(RunAborted, match=r"HTTP 404: model 'nope' does not exist .*check --model"):
        asyncio.run(MathBenchmark(settings, _FlakyExplorer(AIME, status=404), progress=False).arun())
    assert (tmp_path / "run/run.json").exists()


def test_coordination_variants_replay_the_same_pool(tmp_path: Path, monkeypatch) -> None:
    # the fake's trajectories differ by one token: pace the replay so that they finish clearly apart
    monkeypatch.setattr("pacore_benchmarks.math.pool.PACE_SECONDS_PER_TOKEN", 0.02)
    explorer = FakeMathExplorer(AIME)
    variants = ["early_stop", "vote", "dedup", "subset"]
    settings = _settings(tmp_path / "run", schedules=[[8, 2]], samples=1, methods=["pacore"], coordination=variants)
    report = asyncio.run(MathBenchmark(settings, explorer, progress=False).arun())
    assert not report.failures
    rows = {(row["label"], row["problem_id"]): row for row in _rows(tmp_path / "run")}
    labels = Counter(label for label, _ in rows)
    assert labels == {"pacore[8,2]": 3, **{f"pacore[8,2]+{variant}": 3 for variant in variants}}
    assert sum(n for (r, _), n in explorer.calls.items() if r == 0) == 3 * 8  # one pool, replayed by all
    for (label, problem_id), row in rows.items():
        paper = rows[("pacore[8,2]", problem_id)]
        assert row["pool_indices"] == paper["pool_indices"]  # the same draw: paired comparison
        if label.endswith("+vote"):  # a vote over round 2 instead of the final synthesis: one call fewer
            assert row["model_calls"] == 2 and row["outcome"]["selector"] == "vote"
            assert row["ttc"] == paper["ttc"] - SYNTH_TOKENS
        if label.endswith("+early_stop"):  # no final synthesis (round 2 agrees); cut ones count their tokens so far
            assert row["outcome"]["stop"] == "unanimous" and row["correct"] == paper["correct"]
            assert paper["ttc"] - SYNTH_TOKENS - (POOL_TOKENS + 7) * row["cut"] <= row["ttc"] < paper["ttc"]
    assert any(row["cut"] for (label, _), row in rows.items() if label.endswith("+early_stop"))


def test_budget_variant_needs_its_budget(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--budget-tokens"):
        _settings(tmp_path / "run", coordination=["budget"])
    with pytest.raises(ValueError, match="unknown coordination variant 'fast'"):
        _settings(tmp_path / "run", coordination=["fast"])
