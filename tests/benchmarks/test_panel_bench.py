"""``pacore bench panel`` on fast emulators: each arm's requests reach the servers its panel says, the servers'
counts and the client's per-model account agree, and the command prints a table then one JSON line."""

from __future__ import annotations

import json

from pacore_benchmarks.perf.panel import PanelSettings, run_benchmark, small_emulator, strong_emulator
from pacore_graph.cli import main as pacore

FAST = {"ttft": 0.005, "token_delay": 0.0001}


async def test_each_arm_sends_its_slots_where_its_panel_says():
    settings = PanelSettings(
        problems=3,
        rounds=[4],
        small=small_emulator().model_copy(update=FAST),
        strong=strong_emulator().model_copy(update=FAST),
    )
    report = await run_benchmark(settings)
    strong, panel, small = report.run("strong"), report.run("panel"), report.run("small")
    assert (strong.models["strong"].requests, strong.models["small"].requests) == (3 * 5, 0)
    assert (panel.models["small"].requests, panel.models["strong"].requests) == (3 * 3, 3 * 2)  # 3:1, then synthesis
    assert (small.models["small"].requests, small.models["strong"].requests) == (3 * 5, 0)
    for run in report.runs:  # the server's count is the client's per-model account
        assert all(cost.requests == cost.trajectories for cost in run.models.values())
    assert report.summary()["panel_vs_strong"]["strong_tokens"] < 1


def test_the_command_prints_a_table_then_one_json_line(capsys):
    code = pacore(["bench", "panel", "--problems", "1", "--rounds", "2", "--small-weight", "1"])
    out, _ = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and summary["command"] == "bench panel" and summary["counts"] == {"problems": 1, "arms": 3}
    assert summary["arms"]["panel"]["models"]["small"]["requests"] == 1
    assert summary["arms"]["panel"]["models"]["strong"]["requests"] == 2
    assert "pacore bench panel" in out
