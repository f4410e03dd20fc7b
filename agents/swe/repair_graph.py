"""The repair agent's loop as a LangGraph graph: ``agent -> act -> agent ... -> finish``.

* ``agent`` asks the model for the next action (see :mod:`actions`: tool calls when the model offers
  them, else one fenced bash block per reply).
* ``act`` runs the commands in the episode's sandbox, each with a timeout, and shows the model the
  output cut to its head and tail.
* ``finish`` reads the patch: ``git diff`` against the base commit (text files), plus the model's note.

The sandbox never lives in the graph state (it is not data): it is the graph's runtime context
(``invoke(..., context=sandbox)``); :class:`~pacore_agents.swe.repair_episode.RepairEpisode` opens and
closes one per episode. The chat model is a parameter, so any LangChain chat model (a PaCoRe-wrapped one
included) can drive the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import get_runtime

from pacore_agents.swe.actions import (
    BASH_TOOL,
    NO_ACTION,
    SUBMIT_TOOL,
    Action,
    format_observation,
    parse_actions,
    prose,
)
from pacore_agents.swe.repair_settings import RepairSettings
from pacore_agents.swe.sandbox import BaseSandbox, CommandResult
from pacore_graph.extend import ModelRequestError, cut_middle, with_retries


class RepairState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int  # model calls so far
    submitted: bool
    note: str
    stop_reason: str  # submitted | step_limit | error | cancelled
    patch: str
    error: str
    pending: list[dict[str, Any]]  # actions of the last reply, waiting for `act`


def _sandbox() -> BaseSandbox:
    sandbox: BaseSandbox | None = get_runtime().context
    if sandbox is None:
        raise RuntimeError("the repair graph needs an open sandbox: invoke it with context=sandbox")
    return sandbox


class RepairLoop:
    """What the nodes of one repair graph share (the model as each step calls it, the settings, the executor of
    blocking sandbox calls), and the nodes and routes themselves."""

    def __init__(
        self,
        model: BaseChatModel,
        settings: RepairSettings,
        executor: ThreadPoolExecutor | None,
        model_step: Callable[[Runnable[Any, Any]], Runnable[Any, Any]] | None,
    ):
        self.settings = settings
        self.executor = executor
        runnable = _bound_model(model, settings)
        self.step = model_step(runnable) if model_step is not None else runnable

    async def blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    async def agent(self, state: RepairState) -> dict[str, Any]:
        """The model's next reply and the actions in it (a reminder when it holds none)."""

        async def call() -> AIMessage:
            return await self.step.ainvoke(state["messages"])

        try:
            reply, _ = await with_retries(call, self.settings.retry, None)
        except ModelRequestError as exc:
            if exc.status == 400 and "tool" in str(exc).lower():
                raise ModelRequestError(
                    f"the model server refused tool calling ({exc}); serve the model with tool calling "
                    "(vLLM: --enable-auto-tool-choice --tool-call-parser ...) or use --tool-calling never",
                    status=400,
                ) from exc
            raise
        actions = parse_actions(reply)
        update: dict[str, Any] = {
            "messages": [reply] if actions else [reply, HumanMessage(NO_ACTION)],
            "steps": state.get("steps", 0) + 1,
            "pending": [action.model_dump() for action in actions],
        }
        return update

    def after_agent(self, state: RepairState) -> str:
        if state.get("pending"):
            return "act"
        return "finish" if state["steps"] >= self.settings.step_limit else "agent"

    async def act(self, state: RepairState) -> dict[str, Any]:
        """Each pending action's observation, in order: a command's output, or what became of a submit."""
        sandbox = _sandbox()
        update: dict[str, Any] = {"pending": [], "messages": []}
        for action in (Action(**raw) for raw in state.get("pending", [])):
            if action.kind == "submit":
                update.update(submitted=True, stop_reason="submitted", note=action.note[: self.settings.note_chars])
                text = "Submitted."
            elif action.kind == "invalid":
                text = f"Error: {action.error}. Tools: bash(command), submit(note)."
            elif update.get("submitted"):
                text = "Not run: the episode was already submitted."
            else:
                text = await self.run(sandbox, action.command)
            update["messages"].append(
                ToolMessage(text, tool_call_id=action.call_id) if action.call_id else HumanMessage(text)
            )
        return update

    async def run(self, sandbox: BaseSandbox, command: str) -> str:
        """One command in the sandbox, as the model reads it: its exit code and its output cut to head and tail."""
        settings = self.settings
        result = await self.blocking(sandbox.run, command, settings.command_timeout)
        kept = settings.output_head + settings.output_tail
        output = cut_middle(result.output, settings.output_head, settings.output_tail, _cut_marker(result, kept))
        return format_observation(result.exit_code, output, result.timed_out, settings.command_timeout)

    def after_act(self, state: RepairState) -> str:
        return "finish" if state.get("submitted") or state["steps"] >= self.settings.step_limit else "agent"

    async def finish(self, state: RepairState) -> dict[str, Any]:
        """The patch (``git diff`` against the base commit), why the episode stopped, and the model's note."""
        patch = await self.blocking(_sandbox().diff)
        update: dict[str, Any] = {"patch": patch, "stop_reason": state.get("stop_reason") or "step_limit"}
        if not state.get("note"):
            update["note"] = _last_words(state["messages"], self.settings.note_chars)
        return update


def build_repair_graph(
    model: BaseChatModel,
    settings: RepairSettings | None = None,
    *,
    executor: ThreadPoolExecutor | None = None,
    model_step: Callable[[Runnable[Any, Any]], Runnable[Any, Any]] | None = None,
) -> StateGraph[RepairState, Any, Any, Any]:  # in: a partial state (the messages)
    """An uncompiled repair-agent graph; the sandbox is its runtime context (``invoke(..., context=sandbox)``).

    Input: ``{"messages": [...]}`` (see :func:`~pacore_agents.swe.prompts.task_messages`). Output adds
    ``patch``, ``note``, ``stop_reason`` and ``steps``. Blocking sandbox calls run on ``executor``.
    ``model_step`` turns the tool-bound model into what each step calls (messages in, ``AIMessage`` out),
    e.g. a PaCoRe run per call (:func:`~pacore_agents.swe.per_call.pacore_model_call`); by default the
    bound model itself.
    """
    loop = RepairLoop(model, settings or RepairSettings(), executor, model_step)
    builder = StateGraph(RepairState)
    builder.add_node("agent", loop.agent)
    builder.add_node("act", loop.act)
    builder.add_node("finish", loop.finish)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", loop.after_agent, ["act", "agent", "finish"])
    builder.add_conditional_edges("act", loop.after_act, ["agent", "finish"])
    builder.add_edge("finish", END)
    return builder


def uses_tool_calling(model: BaseChatModel, settings: RepairSettings) -> bool:
    """Whether the episode offers OpenAI tools (the model must implement ``bind_tools``)."""
    if settings.tool_calling == "never":
        return False
    if settings.tool_calling == "always":
        return True
    try:
        model.bind_tools([BASH_TOOL])
    except NotImplementedError:
        return False
    return True


def _bound_model(model: BaseChatModel, settings: RepairSettings) -> Runnable[LanguageModelInput, AIMessage]:
    if uses_tool_calling(model, settings):
        return model.bind_tools([BASH_TOOL, SUBMIT_TOOL]).bind(**settings.sampling)
    return model.bind(**settings.sampling) if settings.sampling else model


def _cut_marker(result: CommandResult, kept: int) -> str | None:
    """What the model reads where a long output was cut: the command's real output size, when the sandbox
    had already cut it (None: ``cut_middle``'s own count, which is then the whole truth)."""
    if result.output_bytes is None or len(result.output) <= kept:
        return None
    return f"{len(result.output) - kept} characters cut here; the command printed {result.output_bytes} bytes in all"


def _last_words(messages: Sequence[BaseMessage], limit: int) -> str:
    """The model's last prose, as the note of an episode that ended without ``submit``."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            text = prose(message)
            if text:
                return text[:limit]
    return ""
