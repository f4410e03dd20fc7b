"""``pacore bench coordination`` on a small, fast emulator: every method side by side, the last line JSON."""

from __future__ import annotations

import json

import pytest

from pacore_benchmarks.perf import coordination_cli
from pacore_benchmarks.perf.coordination import CoordinationSettings, bench_emulator, problems, run_benchmark
from pacore_emulator.replies import majority_answer
from pacore_graph.cli import main as pacore

FAST = {"ttft": 0.01, "token_delay": 0.0005, "output_tokens": (40, 400)}


async def test_every_method_runs_the_same_problems_side_by_side():
    settings = CoordinationSettings(
        problems=6,
        schedule=[8, 2],
        lead=2,
        subset=3,
        concurrency=6,
        spacing=0.0,
        emulator=bench_emulator().model_copy(update=FAST),
    )
    report = await run_benchmark(settings)
    runs = {run.method: run for run in report.runs}
    assert list(runs) == ["paper", "budget", "early_stop", "subset", "dedup", "vote"]
    assert all(run.answered == 6 for run in runs.values())
    assert runs["paper"].requests == 6 * (8 + 2 + 1) and runs["paper"].cancelled == 0
    assert runs["vote"].requests == 6 * (8 + 2)  # the vote replaces the final synthesis
    assert runs["early_stop"].cancelled > 0 and report.saved("early_stop") > 0
    assert runs["dedup"].prompt_tokens < runs["paper"].prompt_tokens  # identical conclusions shown once
    assert runs["budget"].stops == {"budget_tokens": 6} and runs["budget"].config["budget"]["tokens"] > 0
    # agreement is measured against the emulator's own majority answer of each problem
    truth = [str(majority_answer(settings.emulator, text)) for text in problems(settings)]
    for run in runs.values():
        assert run.agreeing == [answer == gold for answer, gold in zip(run.answers, truth, strict=True)]
        assert run.agreement == round(sum(run.agreeing) / 6, 4)
    summary = report.summary()
    assert summary["tokens_saved_early_stop"] == report.saved("early_stop")
    assert 0 <= summary["agreement_kept_early_stop"] <= 1
    assert set(summary["methods"]) == set(runs)


@pytest.mark.parametrize("met", [True, False])
def test_the_command_prints_a_table_then_one_json_line_and_exits_1_when_a_target_is_missed(capsys, monkeypatch, met):
    # Three problems may meet the real targets or not: targets every run meets, or none can, decide here.
    targets = dict.fromkeys(coordination_cli.TARGETS, 0.0 if met else 1.01)
    monkeypatch.setattr(coordination_cli, "TARGETS", targets)
    code = pacore(
        [
            "bench",
            "coordination",
            "--problems",
            "3",
            "--rounds",
            "4",
            "--methods",
            "paper,early_stop",
            "--token-delay",
            "0.0005",
            "--output-tokens",
            "40-300",
            "--lead",
            "2",
        ]
    )
    captured = capsys.readouterr()
    out = captured.out.strip().splitlines()
    summary = json.loads(out[-1])
    assert code == (0 if met else 1) and summary["exit_code"] == code
    last = captured.err.strip().splitlines()[-1]  # a missed target is the run's error line, and its summary's error
    assert last.startswith("pacore: error: missed target(s): ") != met and ("error" in summary) != met
    assert ("tokens_saved_early_stop" in last) != met and ("agreement_kept_early_stop" in last) != met
    assert {"tokens_saved_early_stop", "agreement_kept_early_stop", "methods"} <= set(summary)
    assert set(summary["methods"]) == {"paper", "early_stop"} and summary["problems"] == 3
    assert "pacore bench coordination" in "\n".join(out[:-1])


def test_bad_settings_fail_in_one_line_before_anything_runs(capsys):
    assert pacore(["bench", "coordination", "--methods", "paper,nope"]) == 2
    assert "unknown methods ['nope']" in capsys.readouterr().err
    assert pacore(["bench", "coordination", "--mix", "easy=1,medium=1"]) == 2
    assert "unknown answer kinds ['medium']" in capsys.readouterr().err
