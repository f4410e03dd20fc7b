"""``pacore bench escalation`` on a small, fast emulator: both arms take the same steps, and the stronger model's
requests are what each arm's design says."""

from __future__ import annotations

import json

from pacore_benchmarks.perf.escalation import EscalationSettings, escalation_emulator, is_hard, run_benchmark
from pacore_graph.cli import main as pacore

FAST = {"ttft": 0.01, "token_delay": 0.0001, "output_tokens": (40, 400)}


async def test_both_arms_run_the_same_tasks_and_only_escalations_reach_the_stronger_model():
    settings = EscalationSettings(
        tasks=6, hard_share=0.5, lookups=2, schedules=[[3]], emulator=escalation_emulator().model_copy(update=FAST)
    )
    report = await run_benchmark(settings)
    escalation, every_step = report.run("escalation", [3]), report.run("every_step", [3])
    assert escalation.hard == every_step.hard == 3 == sum(is_hard(i, 0.5) for i in range(6))
    assert escalation.strong_requests == 3 * (3 + 1)  # one PaCoRe run per hard task
    assert every_step.strong_requests == 6 * (2 + 1) * (3 + 1)  # a PaCoRe run per step: two lookups, the answer
    assert every_step.model_steps == 6 * 3 and escalation.cheap_calls == escalation.model_steps == 6 * 3 + 3
    for run in (escalation, every_step):  # what the client accounted for is what the emulator generated
        assert run.strong_ttc == run.strong_tokens > 0
    assert report.ratio([3]) == round(every_step.strong_tokens / escalation.strong_tokens, 2) > 1


def test_the_command_shows_progress_and_prints_a_table_then_one_json_line(capsys):
    code = pacore(["bench", "escalation", "--tasks", "2", "--hard-share", "0.5", "--rounds", "2", "--lookups", "1"])
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and summary["command"] == "bench escalation" and summary["exit_code"] == 0
    assert summary["counts"] == {"tasks": 2, "schedules": 1, "arms": 2}
    row = summary["schedules"]["[2]"]
    assert row["escalation"]["strong_requests"] == 1 * 3 and row["every_step"]["strong_requests"] == 2 * 2 * 3
    assert summary["strong_tokens_ratio"] == row["strong_tokens_ratio"] > 1
    assert "every_step: 2/2 tasks" in err and "pacore bench escalation" in out
