"""``pacore mcp``: serve ``pacore_solve`` over stdio (the client starts this process) or streamable HTTP."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from pacore_graph.command_kit import is_loopback, log_to_stderr, say, warn
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import UsageError
from pacore_graph.mcp.http import MCP_PATH, http_app
from pacore_graph.mcp.limits import McpLimits
from pacore_graph.mcp.solve import Solver, log
from pacore_graph.models import OpenAICompatibleChatModel, check_server, serving

TOKEN_VARIABLE = "PACORE_MCP_TOKEN"
Transport = Literal["stdio", "http"]


def create_server(chat: OpenAICompatibleChatModel, defaults: PaCoReConfig, limits: McpLimits) -> Server[Any]:
    """The MCP server (the SDK's low-level ``Server``) offering ``pacore_solve`` over ``chat``'s upstream."""
    solver = Solver(chat, defaults, limits)
    return Server(
        "pacore",
        version=_version(),
        instructions="pacore_solve hands one hard question to PaCoRe (parallel coordinated reasoning) on a "
        "stronger model; call it only for problems you cannot answer reliably yourself.",
        on_list_tools=solver.list_tools,
        on_call_tool=solver.call_tool,
    )


def read_token(token_file: str | None) -> str:
    """The bearer token HTTP clients must send: from ``token_file`` (its first line), else ``$PACORE_MCP_TOKEN``;
    never from the command line, where other users' ``ps`` would show it."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise UsageError(f"cannot read --token-file {token_file}: {reason}") from None
        if not token or not token[0].strip():
            raise UsageError(f"--token-file {token_file} is empty: write the token on its first line")
        return token[0].strip()
    token_text = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token_text:
        raise UsageError(
            f"pacore mcp --transport http needs a bearer token: --token-file FILE or ${TOKEN_VARIABLE} "
            "(clients send it as Authorization: Bearer <token>)"
        )
    return token_text


def serve_mcp(
    defaults: PaCoReConfig,
    limits: McpLimits,
    *,
    transport: Transport,
    base_url: str | None,
    model: str | None = None,
    upstream_api_key: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
) -> int:
    """Serve until the client closes stdin (stdio) or Ctrl-C (HTTP); exit status 0. Without ``base_url`` (and
    ``$OPENAI_BASE_URL``) in front of the embedded model, started and stopped here."""
    if transport == "http" and token is None:
        raise UsageError("pacore mcp --transport http needs a bearer token")
    log_to_stderr(log, "pacore mcp")
    with serving(base_url, model, upstream_api_key) as chat:
        check_server(chat)  # a clear error now if the upstream is down or lacks the model
        server = create_server(chat, defaults, limits)
        schedule = ", ".join(map(str, defaults.rounds)) or "one plain call"
        where = "stdio" if transport == "stdio" else f"http://{_url_host(host)}:{port}{MCP_PATH}"
        say(
            f"serving pacore_solve over MCP at {where} in front of {chat.base_url} (model {chat.model}, default "
            f"rounds [{schedule}], {limits.max_calls} calls at once, at most {limits.max_trajectories} model calls "
            f"per call, call budget {limits.call_tokens or 'unlimited'})"
        )
        if transport == "http" and not is_loopback(host):
            warn(f"listening on {host}, not loopback: whoever reaches it with the token spends your upstream's tokens")
        try:
            if transport == "stdio":
                anyio.run(_serve_stdio, server, chat)
            else:
                _serve_http(server, token or "", host, port)
        except KeyboardInterrupt:
            pass
    return 0


async def _serve_stdio(server: Server[Any], chat: OpenAICompatibleChatModel) -> None:
    """Until the client closes this process's stdin."""
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await chat.aclose()


def _serve_http(server: Server[Any], token: str, host: str, port: int) -> None:
    import uvicorn

    app = http_app(server, token, host)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pacore-graph")
    except PackageNotFoundError:
        return ""
