"""``pacore serve``'s app in front of a scripted upstream, both on loopback, for the endpoint tests.

The upstream (:class:`MockOpenAIServer`) answers as a function of the prompt: a first-round trajectory
gets a draft, a synthesis request (its last user message holds the PaCoRe template) the final answer,
and each reply's completion tokens depend on the prompt, so sums over the request log are checkable.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mock_openai import Handler, MockOpenAIServer
from waits import wait_until

from pacore_graph import PaCoReConfig, chat_model
from pacore_graph.server import BackgroundServer, ServerLimits, create_app

TEMPLATE_MARK = "Reference Responses:"
FINAL_ANSWER = "The answer is 391."


def last_user_text(body: dict[str, Any]) -> str:
    user = [m for m in body["messages"] if m["role"] == "user"][-1]
    content = user["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def is_synthesis(body: dict[str, Any]) -> bool:
    return TEMPLATE_MARK in last_user_text(body)


def completion_tokens(body: dict[str, Any]) -> int:
    """What the scripted upstream reports for a request: a function of the prompt."""
    return 20 + len(json.dumps(body["messages"])) % 17 + (100 if is_synthesis(body) else 0)


def scripted(body: dict[str, Any], attempt: int) -> dict[str, Any]:
    """Drafts that differ by prompt in round 1, the final answer (with reasoning) when synthesising."""
    usage = {"prompt_tokens": 50, "completion_tokens": completion_tokens(body), "total_tokens": 0}
    if is_synthesis(body):
        return {"content": FINAL_ANSWER, "reasoning_content": "17*23 = 391, checked twice.", "usage": usage}
    return {
        "content": f"Draft: 17*23 is 391 (seen {len(body['messages'])} messages).",
        "reasoning_content": "multiply",
        "usage": usage,
    }


class LoopNoting:
    """An ASGI app in front of another that notes the loop serving it; ``state`` stays the app's (the server's
    limits are read from it)."""

    def __init__(self, app: Any):
        self.app, self.state = app, app.state
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)


class ProbedServer(BackgroundServer):
    """A :class:`BackgroundServer` that can list the tasks on the loop serving its app (uvicorn keeps that loop to
    itself): a test compares them with the tasks of the idle server to see that a request left nothing running."""

    def __init__(self, app: Any):
        self.noting = LoopNoting(app)
        super().__init__(self.noting)

    def tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks on the serving loop now (uvicorn's own, the lifespan's, every request's and what it started)."""

        async def listed() -> set[asyncio.Task[Any]]:
            return asyncio.all_tasks() - {asyncio.current_task()}

        assert self.noting.loop is not None, "the app has not been called yet (not even for its lifespan)"
        return asyncio.run_coroutine_threadsafe(listed(), self.noting.loop).result(timeout=10)

    def connections(self) -> int:
        """The HTTP connections uvicorn holds (one past the connection limit is refused before uvicorn sees it)."""
        return len(self.server.server_state.connections)


def upstream_tokens(requests: list[dict[str, Any]]) -> int:
    return sum(completion_tokens(body) for body in requests)


@contextmanager
def endpoint(
    handler: Handler = scripted,
    *,
    rounds: list[int] | None = None,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
    **settings: Any,
) -> Iterator[tuple[MockOpenAIServer, ProbedServer]]:
    """(upstream, endpoint); the endpoint's default schedule is ``rounds`` ([2] unless given)."""
    with MockOpenAIServer(handler) as upstream:
        chat = chat_model(base_url=upstream.base_url, model=upstream.model)
        config = PaCoReConfig(rounds=[2] if rounds is None else rounds, **settings)
        with ProbedServer(create_app(chat, config, api_key=api_key, limits=limits)) as server:
            yield upstream, server


def send_request(server: BackgroundServer, body: dict[str, Any]) -> socket.socket:
    """A bare HTTP client, so the test decides exactly when it hangs up."""
    payload = json.dumps(body).encode()
    connection = socket.create_connection((server.host, server.port), timeout=30)
    connection.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: endpoint\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    return connection


def wait_until_settled(upstream: MockOpenAIServer, server: ProbedServer, idle: set[asyncio.Task[Any]]) -> None:
    """Wait for the state after which nothing more can reach the upstream: the endpoint runs no task it did not
    run when ``idle`` was listed (a run, or a round it would still start, is one), and the upstream holds no
    connection (whatever the endpoint wrote has been recorded). Then the upstream's request log is final."""
    wait_until(lambda: server.tasks() <= idle, what=lambda: f"the endpoint still runs {server.tasks() - idle}")
    wait_until(
        lambda: upstream.open_connections() == 0,
        what=lambda: f"the upstream still holds {upstream.open_connections()} connections",
    )
