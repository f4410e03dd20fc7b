"""Serve an ASGI app with uvicorn on a loopback port in a daemon thread: for tests, notebooks, benchmarks
and examples that need the endpoint and a client in one process. ``pacore serve`` runs uvicorn itself."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from starlette.types import ASGIApp

from pacore_graph.server.connections import uvicorn_config


class BackgroundServer:
    """``with BackgroundServer(app) as server: OpenAI(base_url=server.base_url)``; stopped on exit. Served within
    the app's limits, as ``pacore serve`` serves it (:func:`~pacore_graph.server.connections.uvicorn_config`)."""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0):
        self.host = host
        self.start_timeout = start_timeout
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn_config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, name="pacore-endpoint", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the endpoint did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=self.start_timeout)
        self._socket.close()
