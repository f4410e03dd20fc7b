"""``pacore bench engine --quick`` on real vLLM, as a user types it: the summary's structure and the facts vLLM's own
counters must show (the operator's requests per problem, the prefix cache at work from round 2). Timings and ratios
are reported by the benchmark, never asserted here: two shared cores make them noisy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SIDES = ("operator", "bare client", "n=K")


def test_bench_engine_quick_on_real_vllm(vllm):
    vllm.wait_idle()
    pacore = str(Path(sys.executable).parent / "pacore")
    done = subprocess.run(
        [pacore, "bench", "engine", "--quick", "--base-url", vllm.base_url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["command"] == "bench engine" and summary["exit_code"] == 0
    rounds, k_rounds = summary["rounds"], len(summary["rounds"])
    assert summary["requests_per_problem_expected"] == sum(rounds) + 1
    assert summary["block_size"] == 32 and summary["vllm_version"]
    assert set(summary["sides"]) == set(SIDES)
    assert summary["targets"]["requests_per_problem"] and summary["targets"]["identical_prompts"]
    assert summary["prompt_lengths_match"]
    for side in SIDES:
        figures = summary["sides"][side]
        assert figures["runs"] == summary["repeats"] == 1
        # vLLM counts one finished request per trajectory (an n=K request as K): sum(K) + 1 per problem
        assert figures["requests_per_problem"] == sum(rounds) + 1
        assert figures["wall_s"] > 0 and figures["generated_tokens_per_s"] > 0
        assert figures["generated_tokens"] == (sum(rounds) + 1) * summary["max_tokens"] * summary["problems"]
        assert len(figures["rounds"]) == k_rounds + 1
        for number, row in enumerate(figures["rounds"], 1):
            assert row["round"] == number and row["requests"] == row["k"] * summary["problems"]
            assert row["distinct_prompts"] == summary["problems"]  # each round's K prompts are one prompt
            assert 0 <= row["cached"] <= row["cache_bound"] < row["prompt"]
            if number >= 2 and row["k"] > 1:
                assert row["cached"] > 0  # the K requests of a later round share their prompt
    # the same requests: every side sent exactly the operator's prompts, and vLLM cached them alike
    prompts = {side: [row["prompt"] for row in summary["sides"][side]["rounds"]] for side in SIDES}
    assert prompts["operator"] == prompts["bare client"] == prompts["n=K"]
    assert summary["prefill_ratio_round2plus_operator_vs_n_k"] is not None
    for name in ("throughput_within_5_percent", "prefill_no_more_than_n_k", "cached_at_least_k_minus_1_over_k"):
        assert isinstance(summary["targets"][name], bool)  # reported either way, not asserted
    assert "throughput, operator / bare client" in done.stderr
    vllm.wait_idle()
