"""One repair episode end to end: open a fresh sandbox for the task, run the repair graph in it, always
close it, and hand back the final state with its JSON record."""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig

from pacore_agents.swe.episode_records import episode_record
from pacore_agents.swe.placement import NoHostAvailable
from pacore_agents.swe.prompts import PaCoReProtocol, task_messages
from pacore_agents.swe.repair_graph import build_repair_graph, uses_tool_calling
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_agents.swe.rex_sandbox import HostLost

if TYPE_CHECKING:
    from pacore_agents.swe.sandbox import BaseSandbox

MAX_MOVES = 3  # hosts an episode may lose before it ends with an error


class RepairEpisode:
    """One episode per call: open a fresh sandbox for the task, run the graph in it, always close it.

    ``ainvoke({"messages": [...], "task": row}, config)`` returns the graph's final state plus its
    ``record`` (see :func:`~pacore_agents.swe.episode_records.episode_record`), which names the ``host``
    that ran it. Errors inside the episode do not escape: they end the episode with ``stop_reason="error"``
    and the messages so far, so a crashed episode is recorded, not lost. When the sandbox's host stops
    answering (:class:`HostLost`), the episode starts over in a fresh sandbox on another host, from the
    base commit and the task's first messages; ``record["moves"]`` says from where to where and why. When
    no host can take it (:class:`NoHostAvailable`), the episode raises: it is not a finished episode, so
    a resumed run runs it again where its round has to be run again.
    """

    def __init__(
        self,
        model: BaseChatModel,
        settings: RepairSettings | None = None,
        *,
        open_sandbox: Callable[[dict[str, Any]], BaseSandbox] | None = None,
        model_step: Callable[[Runnable[Any, Any]], Runnable[Any, Any]] | None = None,
        protocol: PaCoReProtocol = "episodes",
    ):
        self.settings = settings or RepairSettings()
        self.protocol = protocol  # what the rules say the references of a synthesis are
        self.tool_calling = uses_tool_calling(model, self.settings)
        self.executor = ThreadPoolExecutor(self.settings.threads, thread_name_prefix="pacore-sandbox")
        graph = build_repair_graph(model, self.settings, executor=self.executor, model_step=model_step)
        self.graph = graph.compile(name="repair_agent")
        self._open = open_sandbox or self._default_open

    def _default_open(self, row: dict[str, Any]) -> BaseSandbox:
        from pacore_agents.swe.sandbox import open_sandbox

        return open_sandbox(row, self.settings.runtime)

    def messages_for(self, row: dict[str, Any]) -> list[BaseMessage]:
        return task_messages(row, tool_calling=self.tool_calling, protocol=self.protocol, runtime=self.settings.runtime)

    async def ainvoke(self, graph_input: dict[str, Any], config: RunnableConfig | None = None) -> dict[str, Any]:
        row = graph_input.get("task")
        if row is None:
            raise ValueError("a repair episode needs its task row: pass input['task']")
        started = time.monotonic()
        moves: list[dict[str, Any]] = []  # hosts lost under this episode, each a fresh start elsewhere
        lost_usage = {"prompt_tokens": 0, "completion_tokens": 0}  # what the lost attempts' model calls cost
        while True:
            state: dict[str, Any] = {"messages": list(graph_input["messages"]), "steps": 0}
            sandbox = None
            try:
                sandbox = await self._open_sandbox(row)
                if moves:
                    moves[-1]["to_host"] = getattr(sandbox, "host", None)
                run_config: RunnableConfig = {**(config or {}), "recursion_limit": 3 * self.settings.step_limit + 10}
                async for values in self.graph.astream(state, run_config, stream_mode="values", context=sandbox):
                    state = values
            except NoHostAvailable:  # no host can take it now: the episode fails, and with it the instance
                raise
            except HostLost as exc:  # its host stopped answering: start over from the base commit elsewhere
                await self._close_quietly(sandbox)
                sandbox = None
                attempt = episode_record(state, row, 0)
                for key in lost_usage:
                    lost_usage[key] += attempt[key]
                moves.append({"from_host": exc.host, "to_host": None, "reason": exc.reason, "steps": attempt["steps"]})
                if len(moves) <= MAX_MOVES:
                    continue
                error = f"{_describe(exc)} ({len(moves)} hosts lost)"
                state = {**state, "stop_reason": "error", "patch": "", "error": error}
            except Exception as exc:  # the episode is over; say why and keep what it did
                state = {**state, "stop_reason": "error", "patch": "", "error": _describe(exc)}
            finally:
                if sandbox is not None:
                    await self._close_sandbox(sandbox)
            break
        record = episode_record(state, row, time.monotonic() - started)
        for key, spent in lost_usage.items():
            record[key] += spent
        lost_on = moves[-1]["from_host"] if moves else None
        record["host"] = getattr(sandbox, "host", "local") if sandbox is not None else lost_on
        record["moves"] = moves
        record["sandbox"] = _sandbox_identity(sandbox, self.settings.runtime)
        record["sandbox_notes"] = list(getattr(sandbox, "notes", None) or [])  # what it stopped or removed
        return {**state, "record": record}

    async def _close_quietly(self, sandbox: BaseSandbox | None) -> None:
        if sandbox is not None:
            with contextlib.suppress(Exception):
                await self._close_sandbox(sandbox)

    async def _open_sandbox(self, row: dict[str, Any]) -> BaseSandbox:
        """Open in a worker thread; if cancelled meanwhile, close the sandbox as soon as it exists."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, self._open, row)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_when_opened)
            raise

    async def _close_sandbox(self, sandbox: BaseSandbox) -> None:
        future = asyncio.get_running_loop().run_in_executor(self.executor, sandbox.close)
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            pass  # the close goes on in its thread; the caller is cancelled anyway

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


def _sandbox_identity(sandbox: BaseSandbox | None, runtime: str) -> dict[str, Any]:
    """Which sandbox ran the episode (a container id for docker), so a trace can be checked against it."""
    if sandbox is None:
        return {"runtime": runtime, "opened": False}
    return {
        "runtime": runtime,
        "opened": True,
        "id": getattr(sandbox, "container_id", None),
        "workdir": getattr(sandbox, "workdir", None),
    }


def _close_when_opened(future: asyncio.Future[BaseSandbox]) -> None:
    if not future.cancelled() and future.exception() is None:
        with contextlib.suppress(Exception):
            future.result().close()


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[:4000]
