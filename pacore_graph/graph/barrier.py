"""How a failed trajectory decides between "recorded and left out" and "the round failed: raise".

Why: LangGraph saves each finished task's output as the task ends and, when a thread is resumed with
``invoke(None, config)``, runs again exactly the tasks that had not finished or had raised. So a round
with no usable conclusion must fail *in its trajectory tasks*, not in the collector after them (the
collector would only see the same failure records again on resume). A trajectory that still fails after
its retries therefore waits until its running siblings are done:

- some sibling produced a usable conclusion: the failure is recorded and left out of the references;
- none did, and all K trajectories of the round ran in this process: every failed one raises
  :class:`~pacore_graph.errors.RoundFailedError`, so a resume re-runs exactly those;
- some siblings finished before a restart (their outputs are saved, their conclusions unknown here):
  the failure is recorded, and the collector decides with the whole round in view. When it finds no
  usable conclusion it raises; a later resume then reaches only the collector, which, seeing that no
  trajectory of the round ran in its process, runs the whole round again.

Who counts as a sibling that is still to come: when this process fanned the round out, all K tasks run
here, so a failed one waits until all K have started and none runs. When the round was fanned out
before a restart (a resume), siblings saved earlier never start here; those that do start come in one
burst, so a failed one waits until none has started or run for ``SETTLE_SECONDS``.

All trajectories of a run share one event loop (the graph's, or the sync loop for a sync run), so the
counters need no lock.
"""

from __future__ import annotations

import asyncio

from pacore_graph.records import TrajectoryData

SETTLE_SECONDS = 0.25


class RoundBarrier:
    """The trajectories of one round that run in this process; ``everyone_here``: all K will."""

    def __init__(self, k: int, everyone_here: bool):
        self.k = k
        self.everyone_here = everyone_here
        self.started = 0
        self.running = 0
        self.usable = False
        self.records: dict[int, TrajectoryData] = {}
        self._changed: asyncio.Event | None = None  # made when a failed one waits; set on a start or stop

    def start(self) -> None:
        self.started += 1
        self.running += 1
        self._change()

    def finish(self, record: TrajectoryData, usable: bool) -> None:
        """A trajectory ended without raising: its record is kept whatever happens next."""
        self.records[record["index"]] = record
        self.usable = self.usable or usable
        self.leave()

    def leave(self) -> None:
        """A trajectory ended (or was cancelled): it no longer counts as running."""
        self.running -= 1
        self._change()

    async def fail(self, record: TrajectoryData) -> bool:
        """Record a trajectory that failed for good; True when the whole round failed here (raise)."""
        self.records[record["index"]] = record
        self.leave()
        while not await self._settled():
            pass
        return not self.usable and self.started >= self.k

    async def _settled(self) -> bool:
        if self._changed is None:
            self._changed = asyncio.Event()
        changed = self._changed
        if self.running > 0 or (self.everyone_here and self.started < self.k):
            await changed.wait()
            return False
        if self.started >= self.k or self.everyone_here:
            return True
        try:
            await asyncio.wait_for(changed.wait(), SETTLE_SECONDS)
        except TimeoutError:
            return True
        return False

    def _change(self) -> None:
        if self._changed is not None:  # someone waits: wake them (each makes a new event to wait on)
            self._changed.set()
            self._changed = None
