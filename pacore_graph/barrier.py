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
  the failure is recorded, and the collector decides with the whole round in view.

All trajectories of a run share one event loop (the graph's, or the sync loop for a sync run), so the
counters need no lock.
"""

from __future__ import annotations

import asyncio

from pacore_graph.records import TrajectoryData


class RoundBarrier:
    """The trajectories of one round that run in this process."""

    def __init__(self, k: int):
        self.k = k
        self.started = 0
        self.running = 0
        self.usable = False
        self.records: dict[int, TrajectoryData] = {}
        self._idle = asyncio.Event()  # binds to the running loop on first wait

    def start(self) -> None:
        self.started += 1
        self.running += 1
        self._idle.clear()

    def finish(self, record: TrajectoryData, usable: bool) -> None:
        """A trajectory ended without raising: its record is kept whatever happens next."""
        self.records[record["index"]] = record
        self.usable = self.usable or usable
        self._stop()

    def leave(self) -> None:
        """A trajectory ended by cancellation: it no longer counts as running."""
        self._stop()

    async def fail(self, record: TrajectoryData) -> bool:
        """Record a trajectory that failed for good; True when the whole round failed here (raise)."""
        self.records[record["index"]] = record
        self._stop()
        await self._idle.wait()
        return not self.usable and self.started >= self.k

    def _stop(self) -> None:
        self.running -= 1
        if self.running <= 0:
            self._idle.set()
