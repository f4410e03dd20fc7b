"""A request's body, read within the size and time limits and parsed strictly, before anything is spent.

A body over ``max_request_bytes`` is refused with a 413 as soon as its ``Content-Length`` says so, or once
that many bytes have come (a chunked body): it is never buffered past the limit, and the connection is
closed rather than drained. uvicorn stops reading a socket while the app has not taken what it buffered
(64 KiB), so a large body costs nothing until it is read here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request

from pacore_graph.inputs import InputError, parse_json
from pacore_graph.server.errors import RequestError
from pacore_graph.server.limits import ServerLimits

CLOSE = {"Connection": "close"}  # the rest of the body is not read: the connection cannot serve another request


def too_large(limits: ServerLimits) -> RequestError:
    return RequestError(
        413,
        f"the request body is larger than this server's limit of {limits.max_request_bytes} bytes "
        "(pacore serve --max-request-mb)",
        code="request_too_large",
        headers=CLOSE,
    )


async def read_body(request: Request, limits: ServerLimits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(400, "the Content-Length header is not a number", headers=CLOSE)
        if int(declared) > limits.max_request_bytes:
            raise too_large(limits)
    body = bytearray()
    try:
        async with asyncio.timeout(limits.body_timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limits.max_request_bytes:
                    raise too_large(limits)
    except TimeoutError:
        raise RequestError(
            408,
            f"the request body did not arrive within {limits.body_timeout:g} s",
            code="body_timeout",
            headers=CLOSE,
        ) from None
    return bytes(body)


async def read_json(request: Request, limits: ServerLimits) -> Any:
    raw = await read_body(request, limits)
    try:
        return parse_json(raw)
    except InputError as exc:
        raise RequestError(400, str(exc)) from None
