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
    settings = settings or RepairSettings()
    runnable = _bound_model(model, settings)
    if model_step is not None:
        runnable = model_step(runnable)

    async def blocking(function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, function, *args)

    async def agent(state: RepairState) -> dict[str, Any]:
        async def call() -> AIMessage:
            return await runnable.ainvoke(state["messages"])

        try:
            reply, _ = await with_retries(call, settings.retry, None)
        except ModelRequestError as exc:
            if exc.status == 400 and "tool" in str(exc).lower():
                raise ModelRequestError(
                    f"the model server refused tool calling ({exc}); serve the model with tool calling "
                    "(vLLM: --enable-auto-tool-choice --tool-call-parser ...) or use --tool-calling never",
                    status=400,
                ) from exc
            raise
        steps = state.get("steps", 0) + 1
        actions = parse_actions(reply)
        update: dict[str, Any] = {"messages": [reply], "steps": steps, "pending": [a.model_dump() for a in actions]}
        if not actions:
            update["messages"] = [reply, HumanMessage(NO_ACTION)]
        return update

    def after_agent(state: RepairState) -> str:
        if state.get("pending"):
            return "act"
        return "finish" if state["steps"] >= settings.step_limit else "agent"

    async def act(state: RepairState) -> dict[str, Any]:
        sandbox = _sandbox()
        replies: list[BaseMessage] = []
        update: dict[str, Any] = {"pending": []}
        for action in (Action(**raw) for raw in state.get("pending", [])):
            if action.kind == "submit":
                update.update(submitted=True, stop_reason="submitted", note=action.note[: settings.note_chars])
                text = "Submitted."
            elif action.kind == "invalid":
                text = f"Error: {action.error}. Tools: bash(command), submit(note)."
            elif update.get("submitted"):
                text = "Not run: the episode was already submitted."
            else:
                result = await blocking(sandbox.run, action.command, settings.command_timeout)
                output = cut_middle(
                    result.output,
                    settings.output_head,
                    settings.output_tail,
                    _cut_marker(result, settings.output_head + settings.output_tail),
                )
                text = format_observation(result.exit_code, output, result.timed_out, settings.command_timeout)
            replies.append(ToolMessage(text, tool_call_id=action.call_id) if action.call_id else HumanMessage(text))
        update["messages"] = replies
        return update

    def after_act(state: RepairState) -> str:
        if state.get("submitted") or state["steps"] >= settings.step_limit:
            return "finish"
        return "agent"

    async def finish(state: RepairState) -> dict[str, Any]:
        patch = await blocking(_sandbox().diff)
        update: dict[str, Any] = {"patch": patch, "stop_reason": state.get("stop_reason") or "step_limit"}
        if not state.get("note"):
            update["note"] = _last_words(state["messages"], settings.note_chars)
        return update

    builder = StateGraph(RepairState)
    builder.add_node("agent", agent)
    builder.add_node("act", act)
    builder.add_node("finish", finish)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", after_agent, ["act", "agent", "finish"])
    builder.add_conditional_edges("act", after_act, ["agent", "finish"])
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
