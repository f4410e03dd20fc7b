"""A run-wide bound on in-flight trajectories, and the admission of rounds under it.

LangGraph's ``max_concurrency`` limits each graph run separately, so nested fan-outs multiply (64
problems x 32 trajectories). One limiter shared by every run of an operator bounds the real load on the
server: a trajectory holds a :class:`Slot` (an asyncio semaphore of ``limit``) while its request is out.
asyncio semaphores belong to one event loop, so there is one per loop.

Rounds are admitted before they fan out (:meth:`ConcurrencyLimiter.admit`): LangGraph builds every Send
task of a step at once, about 13 KB of task machinery each, so 64 problems x 32 trajectories under a limit
of 1024 would build 2048 tasks of which 1024 only wait. The invariant, in one sentence: **a round is
admitted only while fewer than ``limit`` trajectories admitted before it are unfinished, in the order the
rounds asked, and each admitted trajectory is given back exactly once** (its :class:`RoundTicket` sees to
that). So at most ``limit + K - 1`` trajectory tasks are alive on a loop.
"""

from __future__ import annotations

import asyncio
from collections import deque

from pacore_graph.concurrency.per_loop import PerLoop


class ConcurrencyLimiter:
    def __init__(self, limit: int):
        self.limit = limit
        # forgotten as each loop shuts down: a semaphore or admission refers to its loop (see per_loop.py)
        self._semaphores: PerLoop[asyncio.Semaphore] = PerLoop(lambda: asyncio.Semaphore(limit))
        self._admissions: PerLoop[Admission] = PerLoop(lambda: Admission(limit))

    async def admit(self, k: int) -> RoundTicket:
        """Wait until a round of ``k`` trajectories may be fanned out on this loop (see the module docstring)."""
        return await self._admissions.get().enter(k)

    def slot(self) -> Slot:
        """A trajectory's hold on this limit (see :class:`Slot`)."""
        return Slot(self.semaphore())

    def semaphore(self) -> asyncio.Semaphore:
        return self._semaphores.get()


class Slot:
    """One trajectory's place under the limit, taken before the trajectory builds its request (so that the
    trajectories still queued hold little: at 1024 in flight, as many again may be waiting) and then used
    by its retries as their ``slot``: the first attempt runs in it, a retry takes it again after its
    backoff. :meth:`drop` gives it back if no attempt did (the trajectory was cut or failed first)."""

    __slots__ = ("semaphore", "held")

    def __init__(self, semaphore: asyncio.Semaphore):
        self.semaphore = semaphore
        self.held = False

    async def take(self) -> None:
        await self.semaphore.acquire()
        self.held = True

    async def __aenter__(self) -> None:
        if not self.held:
            await self.take()

    async def __aexit__(self, *exc_info: object) -> None:
        self.drop()

    def drop(self) -> None:
        if self.held:
            self.held = False
            self.semaphore.release()


class Admission:
    """The rounds of one loop: ``pending`` trajectories admitted and not given back, and the rounds waiting
    their turn (first come, first admitted)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.pending = 0
        self._waiting: deque[tuple[asyncio.Future[None], int]] = deque()

    async def enter(self, k: int) -> RoundTicket:
        """A ticket for ``k`` trajectories, once fewer than ``limit`` admitted before them are unfinished."""
        if not self._waiting and self.pending < self.limit:
            self.pending += k
            return RoundTicket(self, k)
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append((turn, k))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # admitted, then cancelled before fanning out
                self.give_back(k)
            else:
                turn.cancel()  # give_back skips it
            raise
        return RoundTicket(self, k)

    def give_back(self, count: int) -> None:
        self.pending -= count
        while self._waiting and self.pending < self.limit:
            turn, k = self._waiting.popleft()
            if not turn.done():
                self.pending += k
                turn.set_result(None)


class RoundTicket:
    """The admission of one round's ``k`` trajectories: each gives back its share once (:meth:`give_back_one`),
    and :meth:`give_back_rest` returns what trajectories that never ran (or never will) still hold."""

    __slots__ = ("_admission", "held")

    def __init__(self, admission: Admission, k: int):
        self._admission = admission
        self.held = k

    @property
    def pending(self) -> int:
        """The trajectories admitted on this loop and not given back, this round's included."""
        return self._admission.pending

    def give_back_one(self) -> None:
        if self.held:
            self.held -= 1
            self._admission.give_back(1)

    def give_back_rest(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            self._admission.give_back(held)
