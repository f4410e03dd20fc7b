"""Pool replay: reproducible draws, uniform use of the pool, vote statistics that match theory, and a pool
file that refuses to be mixed with another model's or prompt's trajectories."""

from __future__ import annotations

import asyncio
from collections import Counter
from math import comb
from pathlib import Path

import pytest

from pacore_benchmarks.math.pool import FirstRound, PoolError, PoolReplayExplorer, PoolStore, as_trajectory, draw
from pacore_graph import EpisodeContext
from pacore_graph.coordination import majority_vote
from pacore_graph.extend import Trajectory


def majority_probability(pool_size: int, correct: int, k: int) -> float:
    """Chance that the correct answers form a strict majority of k draws without replacement from a pool
    holding ``correct`` correct trajectories (hypergeometric): with a single wrong answer in the pool and k
    odd, exactly the expected vote@k accuracy."""
    wrong = pool_size - correct
    total = comb(pool_size, k)
    return sum(comb(correct, j) * comb(wrong, k - j) for j in range(k // 2 + 1, k + 1)) / total


def test_draws_are_distinct_reproducible_and_independent_of_schedule() -> None:
    first = draw(16, 4, problem_id="p1", sample=0)
    assert len(set(first)) == 4 and all(0 <= i < 16 for i in first)
    assert draw(16, 4, problem_id="p1", sample=0) == first  # same run, next run, any process
    assert draw(16, 4, problem_id="p1", sample=1) != first
    assert draw(16, 4, problem_id="p2", sample=0) != first
    assert sorted(draw(4, 4, problem_id="p1", sample=3)) == [0, 1, 2, 3]
    with pytest.raises(PoolError, match="at least 5"):
        draw(4, 5, problem_id="p1", sample=0)


def test_draws_use_the_pool_uniformly() -> None:
    """Over many samples every pooled trajectory is drawn about k/N of the time (chi-square-like bound)."""
    pool_size, k, samples = 16, 4, 4000
    counts = Counter(i for s in range(samples) for i in draw(pool_size, k, problem_id="p", sample=s))
    expected = samples * k / pool_size  # 1000
    assert set(counts) == set(range(pool_size))
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts


def test_replayed_votes_match_the_hypergeometric_expectation() -> None:
    """A pool with 9 correct of 16 and one wrong answer: vote@5 accuracy over draws equals P(majority)."""
    pool_size, correct, k, samples = 16, 9, 5, 4000
    answers = ["42"] * correct + ["7"] * (pool_size - correct)
    wins = 0
    for s in range(samples):
        picked = [answers[i] for i in draw(pool_size, k, problem_id="q", sample=s)]
        wins += majority_vote(picked).answer == "42"
    expected = majority_probability(pool_size, correct, k)
    assert 0.5 < expected < 0.9
    assert abs(wins / samples - expected) < 0.03
    # single-trajectory pass@1 is the pool's pass rate; voting helps when it is above one half
    assert expected > correct / pool_size


def test_pool_store_resumes_and_refuses_other_settings(tmp_path: Path) -> None:
    path = tmp_path / "pool.jsonl"
    store = PoolStore(path, model="m", max_tokens=64)
    trajectory = Trajectory(content="\\boxed{1}", completion_tokens=5, finish_reason="stop")
    store.add("p", 0, "prompt", trajectory, answer="1", correct=True)
    store.add("p", 2, "prompt", trajectory, answer="1", correct=True)
    again = PoolStore(path, model="m", max_tokens=64)
    assert again.missing("p", 4) == [1, 3]
    assert [row["index"] for row in again.rows("p")] == [0, 2]
    again.check("p", "prompt")
    with pytest.raises(PoolError, match="model: pool has 'm', run has 'other'"):
        PoolStore(path, model="other", max_tokens=64).check("p", "prompt")
    with pytest.raises(PoolError, match="prompt"):
        again.check("p", "another prompt")
    with pytest.raises(ValueError, match="duplicate"):
        again.add("p", 0, "prompt", trajectory)


class _CountingExplorer:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    async def explore(self, messages, episode) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        self.calls.append((round_index, index))
        return Trajectory(content=f"synth {round_index}.{index}", completion_tokens=3)


def test_replay_explorer_serves_round_one_from_the_pool_only() -> None:
    rows = [{"index": i, "content": f"\\boxed{{{i}}}", "completion_tokens": 10 + i} for i in range(3)]
    delegate = _CountingExplorer()
    explorer = PoolReplayExplorer(delegate)
    pooled = FirstRound([as_trajectory(r) for r in rows])  # the run's payload: its drawn first round

    async def go() -> list[Trajectory]:
        first = [await explorer.explore([], EpisodeContext(round_index=0, index=i, payload=pooled)) for i in range(3)]
        later = await explorer.explore([], EpisodeContext(round_index=1, index=0, payload=pooled))
        return [*first, later]

    out = asyncio.run(go())
    assert [t.content for t in out[:3]] == ["\\boxed{0}", "\\boxed{1}", "\\boxed{2}"]
    assert [t.completion_tokens for t in out[:3]] == [10, 11, 12]
    assert delegate.calls == [(1, 0)]  # one model call: the later round's
    assert out[3].content == "synth 1.0"
    out[0].content = "changed"
    assert pooled.trajectories[0].content == "\\boxed{0}"  # the replay hands out copies
