"""The ``pacore_solve`` calls of one MCP server: one PaCoRe run each, on one upstream shared by every call.

Per call: the arguments are checked (:mod:`.arguments`) and a free call slot taken (``McpLimits.max_calls``: one
more is refused at once, not queued) before anything is sent; each finished round becomes a progress notification
(``progress`` = rounds finished, ``total`` = rounds of the schedule) when the client asked for progress; the answer
is the tool result's text, with the rounds, effective TTC and model calls as its structured content. The SDK
cancels the handler when the client cancels the request; the run is then closed, and with it every upstream
request (the trajectories' HTTP requests), within the time it takes to close a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.config import PaCoReConfig
from pacore_graph.errors import PaCoReError
from pacore_graph.graph.run_state import ProgressListener
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.inputs import one_line
from pacore_graph.mcp.arguments import TOOL_NAME, Refused, input_schema, read_call
from pacore_graph.mcp.limits import McpLimits
from pacore_graph.models import OpenAICompatibleChatModel
from pacore_graph.records import PaCoReResult

log = logging.getLogger("pacore_graph.mcp")


class Solver:
    """What the server's ``tools/list`` and ``tools/call`` answer, over ``chat`` (the upstream model)."""

    def __init__(self, chat: OpenAICompatibleChatModel, defaults: PaCoReConfig, limits: McpLimits):
        self.chat = chat
        self.defaults = defaults
        self.limits = limits
        self.limiter = ConcurrencyLimiter(defaults.max_concurrency)  # trajectories in flight over all calls
        self.running = 0

    def tool(self) -> types.Tool:
        schedule = ", ".join(map(str, self.defaults.rounds)) or "none"
        return types.Tool(
            name=TOOL_NAME,
            title="PaCoRe: parallel coordinated reasoning",
            description=(
                f"Solves one hard, self-contained question with PaCoRe on {self.chat.model}: several solutions in "
                "parallel, then a synthesis of them (slow and costly: many model calls). Use it for problems you "
                "cannot answer reliably yourself (multi-step math, tricky code or logic), not for easy ones. It sees "
                f"nothing of your conversation: put everything it needs into question and context. Default rounds "
                f"[{schedule}]. Returns the answer; progress is reported per round."
            ),
            input_schema=input_schema(self.limits),
            # it only reads: it changes nothing, and two calls may answer differently (it samples)
            annotations=types.ToolAnnotations(
                read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=False
            ),
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[self.tool()])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != TOOL_NAME:
            return error_result(f"unknown tool {one_line(repr(params.name), 60)}: this server offers {TOOL_NAME}")
        try:
            call = read_call(params.arguments, self.defaults, self.limits)
            async with self.slot():
                runner = PaCoReRunner(self.chat, call.config, limiter=self.limiter)
                async with round_progress(ctx, len(call.config.schedule)) as progress:
                    result = await runner.arun(call.messages, on_event=progress)
        except Refused as exc:
            return error_result(f"refused: {exc}")
        except PaCoReError as exc:
            log.warning("a pacore_solve call failed: %s", exc)
            return error_result(f"failed: {one_line(str(exc), 400)}")
        except Exception as exc:  # noqa: BLE001 - a defect: its story in the log, one line to the caller
            log.error("a pacore_solve call failed unexpectedly", exc_info=exc)
            return error_result(f"failed: an internal error of this server ({type(exc).__name__}; see its log)")
        return answer_result(result)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the server's ``max_calls`` call slots, or :class:`Refused` when all are taken."""
        if self.running >= self.limits.max_calls:
            raise Refused(
                f"busy: {self.running} pacore_solve calls are running, this server's limit; try again when one ends"
            )
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1


@contextlib.asynccontextmanager
async def round_progress(ctx: ServerRequestContext[Any, Any], rounds: int) -> AsyncIterator[ProgressListener]:
    """A progress listener that reports each finished round to the client, in order (a no-op for a client that
    sent no progress token); notifications still queued when the run ends are sent before its result."""
    finished: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def listen(event: dict[str, Any]) -> None:
        if event.get("event") == "round_finished":
            finished.put_nowait(event)

    async def send() -> None:
        done = 0
        while (event := await finished.get()) is not None:
            done += 1
            message = (
                f"round {done} of {rounds} finished: K={event['k']}, {event['completion_tokens']:,} completion tokens"
            )
            await ctx.session.report_progress(done, rounds, message)

    sender = asyncio.create_task(send())
    try:
        yield listen
    except BaseException:
        sender.cancel()
        raise
    finished.put_nowait(None)
    await sender


def error_result(text: str) -> types.CallToolResult:
    """A tool error the calling model reads: one line."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=one_line(text, 600))], is_error=True)


def answer_result(result: PaCoReResult) -> types.CallToolResult:
    """The answer as text; the rounds, effective TTC and model calls as structured content."""
    account = result.accounting(full=False)
    account["calls"] = sum(len(r.trajectories) for r in result.rounds)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.answer)],
        structured_content={"answer": result.answer, **account},
    )
