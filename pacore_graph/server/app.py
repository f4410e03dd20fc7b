"""The ASGI app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``.

Built on Starlette, the ASGI framework LangGraph's own server (``langgraph-api``) runs on; served by
uvicorn. (sse-starlette, also installed with it, is not used: it patches uvicorn's ``Server.handle_exit``
for the whole process when imported, and Starlette's ``StreamingResponse`` already cancels a stream
whose client went away.)
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pacore_graph.config import PaCoReConfig
from pacore_graph.models import OpenAICompatibleChatModel, check_server
from pacore_graph.server.body import read_json
from pacore_graph.server.disconnect import ClientGone, DeadlinePassed, until_disconnected
from pacore_graph.server.errors import RequestError, failure_error, internal_error, log
from pacore_graph.server.limits import ServerLimits
from pacore_graph.server.replies import ReplyHeader, completion_body
from pacore_graph.server.request import plan_call
from pacore_graph.server.schedule import aliases
from pacore_graph.server.streaming import sse_stream
from pacore_graph.server.upstream import Upstream

CLIENT_CLOSED_REQUEST = 499  # logged for a reply nobody was left to read (nginx's convention)


def error_response(error: RequestError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def deadline_error(limits: ServerLimits) -> RequestError:
    return RequestError(
        504,
        f"no answer within this server's request timeout ({limits.request_timeout:g} s); its upstream requests "
        "were closed (pacore serve --request-timeout sets it)",
        type="server_error",
        code="request_timeout",
    )


def authorize(request: Request, api_key: str | None) -> None:
    """With an API key configured, every request must carry ``Authorization: Bearer <key>`` (401 otherwise)."""
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise RequestError(
            401, "this server needs an API key: send Authorization: Bearer <key>", code="invalid_api_key"
        )
    if not hmac.compare_digest(given.strip().encode(), api_key.encode()):
        raise RequestError(401, "incorrect API key provided", code="invalid_api_key")


def create_app(
    chat: OpenAICompatibleChatModel,
    defaults: PaCoReConfig | None = None,
    *,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
    panel: Mapping[str, OpenAICompatibleChatModel] | None = None,
) -> Starlette:
    """The endpoint in front of ``chat``'s server (checked now: a clear error if it is down or lacks the
    model). ``chat.model`` answers requests that name no model; ``defaults`` holds the schedule and
    sampling of requests that name none, and ``max_concurrency``, shared by all requests. ``api_key``:
    the key clients must send. ``limits``: what one client may hold (sizes, timeouts, connections; kept as
    ``app.state.limits`` for the server that runs the app). See :mod:`pacore_graph.server` for what a
    request may ask. ``panel``: a panel's chat models by name (``defaults.panel`` names them), each its own server:
    clients ask for model ``panel``."""
    for each in [chat, *(panel or {}).values()]:
        check_server(each)
    defaults = defaults or PaCoReConfig()
    limits = limits or ServerLimits()
    upstream = Upstream(chat, defaults.max_concurrency, panel)

    async def chat_completions(request: Request) -> Response:
        try:
            authorize(request, api_key)
            call = plan_call(await read_json(request, limits), defaults, upstream.default_model)
            await upstream.check_model(call.upstream_model)
            runner = upstream.runner(call)
        except RequestError as exc:
            return error_response(exc)
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        header = ReplyHeader(call.label)
        if call.stream:
            return StreamingResponse(
                sse_stream(runner, call, header, deadline_error(limits), limits.request_timeout),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )
        try:
            work = runner.arun(call.messages, trace=True)
            result = await until_disconnected(request, work, timeout=limits.request_timeout)
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except DeadlinePassed:
            log.warning("a request ran past the request timeout (%g s); its run was cancelled", limits.request_timeout)
            return error_response(deadline_error(limits))
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
            {
                "object": "list",
                "data": [{"id": name, "object": "model", "created": 0, "owned_by": "pacore"} for name in listed],
            }
        )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(RequestError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"))

    async def unexpected_error(request: Request, exc: Exception) -> Response:
        """Anything not answered above: a 500 in OpenAI's shape, never a plain-text page (Starlette then
        raises the error again, and uvicorn logs its traceback)."""
        return error_response(internal_error())

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
    app = Starlette(
        routes=routes, exception_handlers={HTTPException: http_error, Exception: unexpected_error}, lifespan=lifespan
    )
    app.state.limits = limits
    app.state.upstream_slots = defaults.max_concurrency
    return app
