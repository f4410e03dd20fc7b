"""``pacore mcp`` as MCP clients meet it: started as a user starts it (the ``pacore`` command of this venv), over
stdio (the client's child process) or streamable HTTP (a server process with a bearer token), driven by the
official ``mcp`` client. Each server is stopped at the end and the test fails if a process of it is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from waits import still_running, wait_until

from pacore_benchmarks.perf.engine_server import alive, descendants
from pacore_graph.extend import free_port

PACORE = str(Path(sys.executable).parent / "pacore")
TOKEN = "test-token-7f3a"


def stdio_server(*args: str) -> StdioServerParameters:
    """``pacore mcp ARGS`` over stdio, as an MCP client's config starts it."""
    return StdioServerParameters(command=PACORE, args=["mcp", *args])


def stdio_client(*args: str, mode: str = "auto") -> Client:
    return Client(stdio_server(*args), mode=mode)


class Progress:
    """A progress callback that keeps what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))


class HttpServer:
    """``pacore mcp --transport http`` on a free loopback port, its token in ``$PACORE_MCP_TOKEN``."""

    def __init__(self, *args: str, token: str = TOKEN):
        self.args = args
        self.token = token
        self.port = free_port()
        self.process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @asynccontextmanager
    async def client(self, token: str | None = None, mode: str = "auto") -> AsyncIterator[Client]:
        """An official client session with ``token`` (default: the right one) as its bearer token."""
        headers = {"Authorization": f"Bearer {token or self.token}"}
        timeout = httpx2.Timeout(30, read=300)  # the SDK's own defaults
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            async with Client(streamable_http_client(self.url, http_client=http), mode=mode) as client:
                yield client

    def answering(self) -> bool:
        assert self.process is not None
        try:
            return still_running(self.process, "pacore mcp") and httpx.post(self.url, timeout=1).status_code == 401
        except httpx.TransportError:
            return False

    def __enter__(self) -> HttpServer:
        command = [PACORE, "mcp", "--transport", "http", "--port", str(self.port), *self.args]
        env = {**os.environ, "PACORE_MCP_TOKEN": self.token}
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(self.answering, 60, what="pacore mcp --transport http answered")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Ctrl-C, as a user stops it: it must exit 0 and leave no process of its own behind."""
        process, self.process = self.process, None
        if process is None:
            return
        below = descendants(process.pid)
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        finally:
            if process.stderr is not None:
                process.stderr.close()
        assert code == 0, f"pacore mcp exited with {code}"
        wait_until(lambda: not any(alive(pid) for pid in below), 15, what=f"processes of pacore mcp left: {below}")


@contextmanager
def no_process_left() -> Iterator[None]:
    """The processes this block starts (a stdio server, the embedded model behind it) are gone when it ends."""
    before = set(descendants(os.getpid()))
    yield
    wait_until(
        lambda: not [pid for pid in descendants(os.getpid()) if pid not in before and alive(pid)],
        20,
        what="a process started by the MCP client is still running",
    )


def text(result: Any) -> str:
    """A tool result's text."""
    return "".join(part.text for part in result.content if getattr(part, "type", None) == "text")
