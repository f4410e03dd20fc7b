"""Stop a request's PaCoRe run when its client goes away, so its trajectories stop spending tokens upstream.

A plain (non-streamed) reply is written only at the end, so nothing would notice a client that hung up
after minutes of rounds. The ASGI server reports it: once the body is read, the next ``receive()``
returns ``http.disconnect`` when the connection closes. Cancelling the run cancels its model calls,
which closes their HTTP requests upstream. Streamed replies get the same from Starlette's
``StreamingResponse``, which cancels the body iterator on disconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from starlette.requests import Request

T = TypeVar("T")

_winding_down: set[asyncio.Future[Any]] = set()  # cancelled runs still cleaning up, kept from the GC


class ClientGone(Exception):
    """The client disconnected before the answer was ready; its run was cancelled."""


def cancel_in_background(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel each task once and let it wind down by itself.

    Why not cancel and await: that await can be cancelled in turn (Starlette stops a stream through an
    anyio cancel scope, which cancels every further await in the body again), and a second cancellation
    that reaches a LangGraph run while it winds down from the first interrupts it before it has
    cancelled its trajectories: their requests would stay open upstream.
    """
    for task in tasks:
        if not task.done():
            task.cancel()
            _winding_down.add(task)
            task.add_done_callback(_winding_down.discard)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``await work``, cancelled (raising :class:`ClientGone`) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancel_in_background([watcher, task])
    if not task.done():
        raise ClientGone()
    return task.result()
