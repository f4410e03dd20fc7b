"""``pacore mcp --transport http``: the SDK's streamable HTTP app behind a bearer token.

Every HTTP request must carry ``Authorization: Bearer <token>``: anything else is a 401 with a one-line JSON
error, answered before the MCP layer reads the body. The token is compared in constant time. The SDK's own DNS
rebinding protection stays on for a loopback host (its ``Host`` / ``Origin`` checks).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from mcp.server.lowlevel.server import Server
from starlette.types import ASGIApp, Receive, Scope, Send

MCP_PATH = "/mcp"


class BearerToken:
    """ASGI middleware: HTTP requests without the right bearer token get a 401; the app's lifespan passes."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := self.refusal(scope)) is not None:
            body = json.dumps({"error": refusal}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> str | None:
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return "this server needs a bearer token: send Authorization: Bearer <token>"
        if not hmac.compare_digest(token.strip(), self.token):
            return "wrong bearer token"
        return None


def http_app(server: Server[Any], token: str, host: str) -> ASGIApp:
    """The streamable HTTP app at ``/mcp``, behind ``token``. ``host``: where it listens (loopback hosts get the
    SDK's DNS rebinding protection)."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return BearerToken(app, token)
