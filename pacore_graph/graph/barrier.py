"""How a failed trajectory decides between "recorded and left out" and "the round failed: raise".

Why: LangGraph saves each finished task's output as the task ends and, when a thread is resumed with
``invoke(None, config)``, runs again exactly the tasks that had not finished or had raised. So a round
with no usable conclusion must fail *in its trajectory tasks*, not in the collector after them (the
collector would only see the same failure records again on resume). A trajectory that still fails after
its retries therefore waits until every sibling that runs in this process has started and none is running:

- some sibling produced a usable conclusion: the failure is recorded and left out of the references;
- none did, and all K trajectories of the round ran in this process: every failed one raises
  :class:`~pacore_graph.errors.RoundFailedError`, so a resume re-runs exactly those;
- some siblings finished before a restart (their outputs are saved, their conclusions unknown here):
  the failure is recorded, and the collector decides with the whole round in view. When it finds no
  usable conclusion it raises; a later resume then reaches only the collector, which, seeing that no
  trajectory of the round ran in its process, runs the whole round again.

How many siblings run here is state, said by whoever made the round (``here``): all K when this process fanned
the round out; on a resume, the round's tasks the checkpoint holds no output for (the runner counts them in the
checkpoint's pending tasks). When nobody said (a graph resumed with ``invoke(None, ...)`` without the runner),
the trajectories that started are all there are: LangGraph starts a step's tasks together, and a failure comes
after a request at least, so by then every sibling of the step has started.

All trajectories of a run share one event loop (the graph's, or the sync loop for a sync run), so the
counters need no lock.
"""

from __future__ import annotations

import asyncio

from pacore_graph.records import TrajectoryData


class RoundBarrier:
    """The trajectories of one round that run in this process: ``here`` of its ``k`` will (None: unknown)."""

    def __init__(self, k: int, here: int | None):
        self.k = k
        self.here = here
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

    @property
    def settled(self) -> bool:
        """Every trajectory that runs here has started, and none is running."""
        return self.running == 0 and self.started >= (self.started if self.here is None else self.here)

    async def fail(self, record: TrajectoryData) -> bool:
        """Record a trajectory that failed for good; True when the whole round failed here (raise)."""
        self.records[record["index"]] = record
        self.leave()
        while not self.settled:
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()
        return not self.usable and self.started >= self.k

    def _change(self) -> None:
        if self._changed is not None:  # someone waits: wake them (each makes a new event to wait on)
            self._changed.set()
            self._changed = None
