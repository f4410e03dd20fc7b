"""The viewer's HTTP server: the page, the folder's index, one problem at a time, and the folder's own files, read
only, on loopback unless told otherwise.

Routes (GET and HEAD only; anything else is 405):

    /                  the page (index.html), /app/viewer.js, /app/viewer.css
    /api/index         the index (JSON): read again on each request, so rows appended since show up
    /api/problem?key=  one problem's data (JSON), 404 for a key the index has not
    /api/part?key=&name=   a long text of a problem loaded when asked for (a pool trajectory's reasoning)
    /files/PATH        a file under the folder, as text/plain (``../``, absolute paths and symlinks out: 403)

Every answer forbids the page to reach anything but this server (Content-Security-Policy) and is never sniffed
as another type. On loopback the Host header must name loopback too, so that a web page elsewhere cannot read
the folder through a DNS name that points at 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from pacore_graph.command_kit import is_loopback
from pacore_graph.viewer.folder import FolderView
from pacore_graph.viewer.paths import OutsideFolder

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/app/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
}
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def static_text(name: str) -> str:
    """A file of the page, shipped as package data."""
    return files("pacore_graph.viewer").joinpath("static", name).read_text(encoding="utf-8")


class ViewServer(ThreadingHTTPServer):
    """Serves one folder's view; ``url`` once bound. Requests run one at a time against the view (its index
    grows as the run beside it appends), each in a thread of its own."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, view: FolderView, host: str = "127.0.0.1", port: int = 0):
        if ":" in host:  # an IPv6 address
            self.address_family = socket.AF_INET6
        self.view = view
        self.view_lock = threading.Lock()
        self.loopback = is_loopback(host)
        super().__init__((host, port), ViewHandler)
        bound_port = self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound_port}/"
        self.allowed_hosts = {f"{name}:{bound_port}" for name in (*LOOPBACK_NAMES, shown)}


class ViewHandler(BaseHTTPRequestHandler):
    server: ViewServer
    head_only = False  # a HEAD request: headers, no body
    server_version = "pacore-view"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not every request."""

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._answer(head=True)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(head=False)

    def _refuse_method(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            b"read only: GET and HEAD\n",
            "text/plain; charset=utf-8",
            extra={"Allow": "GET, HEAD"},
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method  # noqa: N815 - http.server's names

    def _answer(self, head: bool) -> None:
        self.head_only = head
        if self.server.loopback and self.headers.get("Host", "") not in self.server.allowed_hosts:
            self._send(HTTPStatus.FORBIDDEN, b"this server answers requests for its own loopback address only\n")
            return
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        try:
            if path in STATIC:
                name, kind = STATIC[path]
                self._send(HTTPStatus.OK, static_text(name).encode("utf-8"), kind, cache=True)
            elif path == "/api/index":
                with self.server.view_lock:
                    index = self.server.view.index()
                self._json(index)
            elif path == "/api/problem":
                with self.server.view_lock:
                    problem = self.server.view.problem(_one(query, "key"))
                if problem is None:
                    self._send(HTTPStatus.NOT_FOUND, b"no such problem\n")
                else:
                    self._json(problem)
            elif path == "/api/part":
                with self.server.view_lock:
                    text = self.server.view.part(_one(query, "key"), _one(query, "name"))
                if text is None:
                    self._send(HTTPStatus.NOT_FOUND, b"no such part\n")
                else:
                    self._send(HTTPStatus.OK, text.encode("utf-8"))
            elif path.startswith("/files/"):
                self._file(unquote(path[len("/files/") :]))
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n")
        except OutsideFolder as exc:
            self._send(HTTPStatus.FORBIDDEN, f"{exc}\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _file(self, relative: str) -> None:
        path = self.server.view.path(relative)  # OutsideFolder: 403
        if not path.is_file():
            self._send(HTTPStatus.NOT_FOUND, b"no such file in the folder\n")
            return
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            self._head(HTTPStatus.OK, size, "text/plain; charset=utf-8")
            if not self.head_only:
                shutil.copyfileobj(handle, self.wfile)

    def _json(self, data: Any) -> None:
        self._send(HTTPStatus.OK, orjson.dumps(data), "application/json")

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        kind: str = "text/plain; charset=utf-8",
        *,
        cache: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        self._head(status, len(body), kind, cache=cache, extra=extra)
        if not self.head_only:
            self.wfile.write(body)

    def _head(
        self, status: HTTPStatus, size: int, kind: str, *, cache: bool = False, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(size))
        self.send_header("Content-Security-Policy", POLICY)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "max-age=60" if cache else "no-store")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()


def _one(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name) or [""]
    return values[0]
