"""The collector policy of a run: opt-in; full passes spaced out while runs are in flight, put back after."""

from __future__ import annotations

import asyncio
import gc

import pytest

from pacore_graph import PaCoReConfig, asolve
from pacore_graph.graph.gc_policy import FULL_PASS_THRESHOLD, spaced_full_collections
from pacore_graph.records import Trajectory


class ThresholdProbe:
    """Records the collector's thresholds while each trajectory runs."""

    def __init__(self, delay: float = 0.0):
        self.seen: list[tuple[int, ...]] = []
        self.delay = delay

    async def explore(self, messages, episode) -> Trajectory:
        round_index, index = episode.round_index, episode.index
        self.seen.append(gc.get_threshold())
        await asyncio.sleep(self.delay)
        return Trajectory(content=f"conclusion {round_index}.{index}", completion_tokens=1)


@pytest.fixture
def default_thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*before)


async def test_full_passes_are_spaced_out_during_runs_and_restored_after(default_thresholds):
    probe = ThresholdProbe(delay=0.01)
    config = PaCoReConfig(rounds=[3], spaced_gc=True)
    await asyncio.gather(*(asolve(probe, f"problem {n}", config) for n in range(3)))
    assert len(probe.seen) == 12
    assert set(probe.seen) == {(700, 10, FULL_PASS_THRESHOLD)}
    assert gc.get_threshold() == default_thresholds


async def test_by_default_the_collector_is_left_alone(default_thresholds):
    probe = ThresholdProbe()
    await asolve(probe, "problem", PaCoReConfig(rounds=[2]))
    assert set(probe.seen) == {default_thresholds}


def test_the_command_line_turns_it_on():
    from pacore_graph.cli import build_parser, config_from_args

    assert config_from_args(build_parser().parse_args(["solve", "q", "--rounds", "2"])).spaced_gc


async def test_a_run_that_fails_still_restores_the_thresholds(default_thresholds):
    class Broken:
        async def explore(self, messages, episode) -> Trajectory:
            raise ValueError("not transient")

    with pytest.raises(Exception, match="none of its 2 trajectories"):
        await asolve(Broken(), "problem", PaCoReConfig(rounds=[2], spaced_gc=True))
    assert gc.get_threshold() == default_thresholds


def test_thresholds_someone_else_set_meanwhile_are_kept(default_thresholds):
    with spaced_full_collections():
        with spaced_full_collections():  # nested runs count, the inner exit restores nothing
            pass
        assert gc.get_threshold() == (700, 10, FULL_PASS_THRESHOLD)
        gc.set_threshold(500, 5, 5)  # the application changed its mind during the run
    assert gc.get_threshold() == (500, 5, 5)


def test_a_disabled_or_already_relaxed_collector_is_not_touched(default_thresholds):
    gc.set_threshold(700, 10, 1000)
    with spaced_full_collections():
        assert gc.get_threshold() == (700, 10, 1000)
    gc.set_threshold(0, 10, 10)  # threshold 0 switches automatic collection off
    with spaced_full_collections():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)
