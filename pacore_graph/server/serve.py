"""``pacore serve``: PaCoRe behind an OpenAI-compatible endpoint, in front of one upstream server."""

from __future__ import annotations

from typing import Any

import uvicorn

from pacore_graph.command_kit import is_loopback, log_to_stderr, say, warn
from pacore_graph.config import PaCoReConfig
from pacore_graph.models import serving
from pacore_graph.models.panel_file import PanelFile, serving_panel
from pacore_graph.server.app import create_app
from pacore_graph.server.connections import uvicorn_config
from pacore_graph.server.errors import log
from pacore_graph.server.limits import ServerLimits, connection_limit, raise_open_file_limit
from pacore_graph.server.upstream import PANEL_MODEL


def serve(
    defaults: PaCoReConfig,
    *,
    base_url: str | None,
    model: str | None = None,
    upstream_api_key: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8100,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
    panel: PanelFile | None = None,
) -> int:
    """Run the endpoint until Ctrl-C (exit status 0); without ``base_url`` (and ``$OPENAI_BASE_URL``) in front of the
    embedded model, started and stopped here. The process's open-file limit is raised to its hard limit first
    (thousands of client and upstream sockets), and the connection limit kept within it."""
    limits = limits or ServerLimits()
    if not is_loopback(host) and api_key is None:
        warn(f"listening on {host} without --api-key: anyone who reaches this port spends your upstream's tokens")
    log_to_stderr(log, "pacore")
    raise_open_file_limit()
    connections = connection_limit(limits, defaults.max_concurrency)
    if connections < limits.max_connections:
        warn(
            f"the open-file limit allows {connections} client connections, not {limits.max_connections} (raise it "
            "with ulimit -n)"
        )
    if panel is not None:
        return _serve_panel(defaults, panel, host, port, api_key, limits, connections)
    with serving(base_url, model, upstream_api_key) as chat:
        app = create_app(chat, defaults, api_key=api_key, limits=limits)
        schedule = ", ".join(map(str, defaults.rounds)) or "one plain call"
        timeout = f"{limits.request_timeout:g} s" if limits.request_timeout else "none"
        say(
            f"serving PaCoRe at http://{host}:{port}/v1 in front of {chat.base_url} (model {chat.model}, default "
            f'rounds [{schedule}]; pick per call with model pacore-high/{chat.model} or a "pacore" body field; '
            f"request timeout {timeout}, bodies up to {limits.max_request_bytes} bytes, {connections} "
            "connections)"
        )
        _run(app, host, port)
    return 0


def _serve_panel(
    defaults: PaCoReConfig,
    panel: PanelFile,
    host: str,
    port: int,
    api_key: str | None,
    limits: ServerLimits,
    connections: int,
) -> int:
    """The endpoint in front of a panel of upstream servers (``pacore serve --panel FILE``)."""
    assert defaults.panel is not None, "the config holds the panel the file names"
    with serving_panel(panel) as chats:
        synthesizer = chats[defaults.panel.final_model]
        app = create_app(synthesizer, defaults, api_key=api_key, limits=limits, panel=chats)
        members = ", ".join(f"{name} ({chat.model} at {chat.base_url})" for name, chat in chats.items())
        say(
            f"serving a PaCoRe panel at http://{host}:{port}/v1: {members}; the final round by "
            f"{defaults.panel.final_model}; clients ask for model {PANEL_MODEL!r} (or pacore-high/{PANEL_MODEL}); "
            f"{connections} connections"
        )
        _run(app, host, port)
    return 0


def _run(app: Any, host: str, port: int) -> None:
    try:
        uvicorn.Server(uvicorn_config(app, host=host, port=port, log_level="info")).run()
    except KeyboardInterrupt:  # uvicorn shuts down cleanly on Ctrl-C, then passes the signal on
        pass
