"""``pacore bench reuse`` on a small, fast emulator: the continued run sends only what the earlier one lacks, and
escalating costs what the later schedule alone costs plus the earlier syntheses."""

from __future__ import annotations

import json

from pacore_benchmarks.perf.reuse import ReuseSettings, reuse_emulator, run_benchmark
from pacore_graph.cli import main as pacore

FAST = {"ttft": 0.0, "token_delay": 0.0, "output_tokens": (40, 400)}


async def test_escalation_sends_only_what_it_lacks_and_meets_the_target():
    settings = ReuseSettings(problems=3, emulator=reuse_emulator().model_copy(update=FAST))
    report = await run_benchmark(settings)
    assert report.later_alone.requests == 3 * 17 and report.earlier.requests == 3 * 5
    assert report.continued.requests == 3 * (12 + 1) and report.continued.reused == 3 * 4
    # the emulator draws the same replies for the same prompt and occurrence: the 16 first-round trajectories of
    # the escalation are those of medium alone, and the medium syntheses see the same references
    assert report.escalation_tokens == report.target_tokens
    assert report.summary()["escalation_over_target"] == 1.0
    assert report.summary()["continued_over_later_alone"] < 1


def test_the_command_prints_a_table_then_one_json_line_and_refuses_a_smaller_later(capsys):
    code = pacore(["bench", "reuse", "--problems", "2", "--earlier", "2", "--later", "4", "--token-delay", "0"])
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and summary["command"] == "bench reuse" and summary["exit_code"] == 0
    assert summary["continued"]["requests"] == 2 * (2 + 1) and summary["continued"]["reused"] == 2 * 2
    assert summary["escalation_over_target"] <= 1 and "pacore bench reuse" in out and "continued [4]" in err
    assert pacore(["bench", "reuse", "--earlier", "medium", "--later", "low"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().startswith(
        "pacore: error: the --earlier run ran rounds [16]; rounds [4] is smaller"
    )
