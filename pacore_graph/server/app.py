"""The ASGI app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``.

Built on Starlette, the ASGI framework LangGraph's own server (``langgraph-api``) runs on; served by
uvicorn. (sse-starlette, also installed with it, is not used: it patches uvicorn's ``Server.handle_exit``
for the whole process when imported, and Starlette's ``StreamingResponse`` already cancels a stream
whose client went away.)
"""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pacore_graph.config import PaCoReConfig
from pacore_graph.models import OpenAICompatibleChatModel, check_server
from pacore_graph.server.disconnect import ClientGone, until_disconnected
from pacore_graph.server.errors import RequestError, failure_error
from pacore_graph.server.replies import ReplyHeader, completion_body
from pacore_graph.server.request import plan_call
from pacore_graph.server.schedule import aliases
from pacore_graph.server.streaming import sse_stream
from pacore_graph.server.upstream import Upstream

CLIENT_CLOSED_REQUEST = 499  # logged for a reply nobody was left to read (nginx's convention)


def error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


def authorize(request: Request, api_key: str | None) -> None:
    """With an API key configured, every request must carry ``Authorization: Bearer <key>`` (401 otherwise)."""
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise RequestError(401, "this server needs an API key: send Authorization: Bearer <key>",
                           code="invalid_api_key")
    if not hmac.compare_digest(given.strip().encode(), api_key.encode()):
        raise RequestError(401, "incorrect API key provided", code="invalid_api_key")


async def read_json(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise RequestError(400, f"the request body is not valid JSON ({exc})") from None


def create_app(chat: OpenAICompatibleChatModel, defaults: PaCoReConfig | None = None, *,
               api_key: str | None = None) -> Starlette:  # fmt: skip
    """The endpoint in front of ``chat``'s server (checked now: a clear error if it is down or lacks the
    model). ``chat.model`` answers requests that name no model; ``defaults`` holds the schedule and
    sampling of requests that name none, and ``max_concurrency``, shared by all requests. ``api_key``:
    the key clients must send. See :mod:`pacore_graph.server` for what a request may ask."""
    check_server(chat)
    defaults = defaults or PaCoReConfig()
    upstream = Upstream(chat, defaults.max_concurrency)

    async def chat_completions(request: Request) -> Response:
        try:
            authorize(request, api_key)
            call = plan_call(await read_json(request), defaults, upstream.default_model)
            await upstream.check_model(call.upstream_model)
            runner = upstream.runner(call)
        except RequestError as exc:
            return error_response(exc)
        header = ReplyHeader(call.label)
        if call.stream:
            return StreamingResponse(
                sse_stream(runner, call, header), media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )  # fmt: skip
        try:
            result = await until_disconnected(request, runner.arun(call.messages, trace=True))
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except Exception as exc:
            return error_response(failure_error(exc))
        return JSONResponse(completion_body(header, result))

    async def models(request: Request) -> Response:
        try:
            authorize(request, api_key)
        except RequestError as exc:
            return error_response(exc)
        names = await upstream.listed_models()
        listed = [*names, *(alias for name in names for alias in aliases(name))]
        return JSONResponse(
            {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "pacore"}
                                        for name in listed]}
        )  # fmt: skip

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(RequestError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await upstream.aclose()

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
