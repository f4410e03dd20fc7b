"""A run-wide bound on in-flight trajectories.

LangGraph's ``max_concurrency`` limits each graph run separately, so nested fan-outs multiply (64
problems x 32 trajectories). One limiter shared by every run of an operator bounds the real load on the
server. asyncio semaphores belong to one event loop, so there is one per loop.

Rounds are admitted too (:meth:`ConcurrencyLimiter.admit`): LangGraph builds every Send task of a step at
once, about 13 KB of task machinery each, so 64 problems x 32 trajectories under a limit of 1024 would
build 2048 tasks of which 1024 only wait. An async run fans a round out once fewer than ``limit`` of the
trajectories admitted before it are unfinished (at most K - 1 past the limit wait for a slot).

Requests go out before responses are digested (:meth:`Admission.send_first`). When a wave of responses
comes back, each one that is in gives its admission back at once, and the next wave's trajectories
(LangGraph building their tasks, each sending its request) go first. The digest waits: the record, the
barrier and LangGraph finishing the task, which nothing needs before the rest of its round is in. Otherwise
the client, CPU-bound while a wave turns over, would hold the next wave back by the time it takes to digest
the last one. At most ``limit // 8`` digests wait, so the tasks alive stay near the limit.
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

    async def admit(self, k: int) -> Admission:
        """Wait until a round of ``k`` trajectories may be fanned out (rounds in the order they asked); each
        of them then calls ``finished`` on the returned admission once, however it ends."""
        admission = self._admissions.get()
        await admission.enter(k)
        return admission

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
    """The trajectories admitted on one loop and not yet finished, and the rounds waiting their turn."""

    STALL = 0.01
    """Seconds without a request going out after which waiting digests go ahead anyway: what is left to
    send is held back by something else (a full limiter, LangGraph's own ``max_concurrency``, which may be
    waiting for these very digests)."""

    DIGEST_WAIT_SHARE = 8
    """At most ``limit // DIGEST_WAIT_SHARE`` digests wait at once (send_first): each keeps its task alive."""

    def __init__(self, limit: int):
        self.limit = limit
        self.pending = 0
        self.unsent = 0  # admitted trajectories whose request has not gone out (see send_first)
        self._sent = 0  # requests gone out so far: the stall check's measure of progress
        self._waiting: deque[tuple[asyncio.Future[None], int]] = deque()
        self._digests: list[asyncio.Future[None]] = []
        self._stall_check: asyncio.TimerHandle | None = None

    async def enter(self, k: int) -> None:
        if not self._waiting and self.pending < self.limit:
            self.pending += k
            self.unsent += k
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append((turn, k))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # admitted, then cancelled before fanning out
                self.finished(k)
                self.sent(k)
            else:
                turn.cancel()
            raise

    def finished(self, count: int = 1) -> None:
        self.pending -= count
        while self._waiting and self.pending < self.limit:
            turn, k = self._waiting.popleft()
            if not turn.done():
                self.pending += k
                self.unsent += k
                turn.set_result(None)

    def sent(self, count: int = 1) -> None:
        """``count`` admitted trajectories have sent their request (or never will)."""
        self.unsent -= count
        self._sent += count
        if self.unsent <= 0:
            self._digest_now()

    async def send_first(self) -> None:
        """Return once the trajectories admitted so far have sent their requests (see the module docstring);
        at once when they have, or when ``limit // DIGEST_WAIT_SHARE`` digests wait already."""
        if self.unsent <= 0 or len(self._digests) >= self.limit // self.DIGEST_WAIT_SHARE:
            return
        loop = asyncio.get_running_loop()
        turn = loop.create_future()
        self._digests.append(turn)
        if self._stall_check is None:
            self._stall_check = loop.call_later(self.STALL, self._check_stall, self._sent)
        await turn

    def _check_stall(self, sent_before: int) -> None:
        if self._sent == sent_before:
            self._digest_now()
        else:
            self._stall_check = asyncio.get_running_loop().call_later(self.STALL, self._check_stall, self._sent)

    def _digest_now(self) -> None:
        if self._stall_check is not None:
            self._stall_check.cancel()
            self._stall_check = None
        digests, self._digests = self._digests, []
        for turn in digests:
            if not turn.done():
                turn.set_result(None)
