"""Stop a request's PaCoRe run when its client goes away, so its trajectories stop spending tokens upstream.

The same happens when a request's deadline passes (``pacore serve --request-timeout``).

A plain (non-streamed) reply is written only at the end, so nothing would notice a client that hung up
after minutes of rounds. The ASGI server reports it: once the body is read, the next ``receive()``
returns ``http.disconnect`` when the connection closes. Cancelling the run cancels its model calls,
which closes their HTTP requests upstream. Streamed replies get the same from Starlette's
``StreamingResponse``, which cancels the body iterator on disconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the answer was ready; its run was cancelled."""


class DeadlinePassed(Exception):
    """The request's deadline passed before the answer was ready; its run was cancelled."""


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel the tasks and wait until they have ended.

    Starlette stops a stream through an anyio cancel scope, which cancels this wait again at once: the run
    is then cancelled a second time while it winds down, and its runner's teardown still closes every
    trajectory (:meth:`~pacore_graph.graph.context.PaCoReContext.close`).
    """
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(request: Request, work: Awaitable[T], timeout: float | None = None) -> T:
    """``await work``, cancelled if the client disconnects first (raising :class:`ClientGone`) or if
    ``timeout`` seconds pass first (raising :class:`DeadlinePassed`)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finished, gone = task.done(), watcher.done()
    finally:
        await cancel_and_wait(watcher, task)
    if not finished:
        raise ClientGone() if gone else DeadlinePassed()
    return task.result()
