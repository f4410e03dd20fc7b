"""The repair agent: a model works in a repository through ``bash`` and ``submit`` until it submits.

One episode is a small LangGraph loop, ``agent -> act -> agent ... -> finish``:

* ``agent`` asks the model for the next action. Models with OpenAI tool calling get the tools
  ``bash(command)`` and ``submit(note)``; for any other model (or a reply with no tool call) one fenced
  ```bash block in the reply is the action, and a block holding only ``submit`` ends the episode.
* ``act`` runs the commands in the episode's sandbox, each with a timeout, and shows the model the
  output cut to its head and tail.
* ``finish`` reads the patch: ``git diff`` against the base commit (text files), plus the model's note.

The sandbox never lives in the graph state (it is not data): ``RepairEpisode`` opens a fresh one per
episode, hands it to the graph as its runtime context, and closes it whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import get_runtime
from pydantic import BaseModel, Field

from pacore_graph.config import RetryPolicy
from pacore_graph.errors import ModelRequestError
from pacore_graph.prompt import message_text
from pacore_graph.retry import with_retries


class RepairSettings(BaseModel):
    """Limits and sampling of one repair episode."""

    step_limit: int = Field(30, ge=1, description="model calls per episode at most")
    command_timeout: float = Field(120.0, gt=0, description="seconds one shell command may run")
    output_head: int = Field(4000, ge=0, description="characters kept from the start of a long output")
    output_tail: int = Field(4000, ge=0, description="characters kept from the end of a long output")
    note_chars: int = Field(2000, ge=0, description="cap on the model's final note")
    tool_calling: Literal["auto", "always", "never"] = Field(
        "auto", description="OpenAI tool calling when the model supports it (auto), or fenced bash blocks only"
    )
    sampling: dict[str, Any] = Field(default_factory=dict, description="temperature, top_p, max_tokens, ...")
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="retries of transient model errors")
    runtime: Literal["docker", "local"] = "docker"
    threads: int = Field(64, ge=1, description="threads for blocking sandbox calls (one per running command)")


# ------------------------------------------------------------------------------------------- prompts

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run one bash command in the repository (non-interactive; output is cut when long).",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command line to run"}},
            "required": ["command"],
        },
    },
}
SUBMIT_TOOL = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Finish: your changes to the repository are the fix. Call it once, when done.",
        "parameters": {
            "type": "object",
            "properties": {"note": {"type": "string", "description": "one or two sentences on what you changed"}},
        },
    },
}

_RULES = """You are fixing an issue in a software repository checked out at {workdir}.
Work like a careful engineer: read the relevant code, reproduce the problem, edit the source files, and
check your fix. Each command runs in a fresh `bash -lc` in {workdir} (no interactive programs, no network;
edit files with sed, python or a here-document). Do not change or add tests unless the issue asks you to;
the fix belongs in the source code. If the task shows reference responses (patches from other attempts),
none of them is applied to your checkout: judge them, then make and check your own fix."""

_TOOL_RULES = """
Use the `bash` tool for every command. When the fix is done, call `submit` with a short note."""

_BLOCK_RULES = """
Reply with a short thought and exactly ONE command in a fenced block:

```bash
<command>
```

You will see its output in the next message. When the fix is done, write a short note on what you
changed, followed by a block holding only the word submit:

```bash
submit
```"""


def system_prompt(workdir: str, tool_calling: bool) -> str:
    return _RULES.format(workdir=workdir) + (_TOOL_RULES if tool_calling else _BLOCK_RULES)


def task_prompt(row: dict) -> str:
    """The user message of an episode: the problem statement only (never the hidden tests or patch)."""
    return (
        f"Repository: {row.get('repo', '?')}\n\n"
        f"<issue>\n{row['problem_statement'].strip()}\n</issue>\n\n"
        "Make the smallest change to the source files that resolves this issue."
    )


def task_messages(row: dict, *, tool_calling: bool = True, workdir: str = "/testbed") -> list[BaseMessage]:
    """System rules plus the task: what round 1 sends; later rounds replace only the user message."""
    return [SystemMessage(system_prompt(workdir, tool_calling)), HumanMessage(task_prompt(row))]


# ------------------------------------------------------------------------------------------- actions


class Action(BaseModel):
    """One thing the model asked for: a command, or the submission."""

    kind: Literal["bash", "submit", "invalid"]
    command: str = ""
    note: str = ""
    call_id: str | None = None  # the tool call it answers; None for a fenced block
    error: str = ""


_BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)


def parse_actions(message: AIMessage) -> list[Action]:
    """The actions of one model reply: its tool calls, else its fenced bash block."""
    text = message_text(message)
    actions: list[Action] = []
    for call in message.tool_calls:
        name, args = call.get("name"), call.get("args") or {}
        if name == "bash" and str(args.get("command", "")).strip() == "submit":
            actions.append(Action(kind="submit", note=text, call_id=call.get("id")))
        elif name == "bash" and isinstance(args.get("command"), str) and args["command"].strip():
            actions.append(Action(kind="bash", command=args["command"], call_id=call.get("id")))
        elif name == "submit":
            actions.append(Action(kind="submit", note=str(args.get("note") or text), call_id=call.get("id")))
        else:
            error = f"unknown tool {name!r}" if name not in ("bash", "submit") else "bash needs a non-empty command"
            actions.append(Action(kind="invalid", call_id=call.get("id"), error=error))
    for call in message.invalid_tool_calls:
        actions.append(
            Action(kind="invalid", call_id=call.get("id"), error=f"unreadable arguments: {call.get('error')}")
        )
    if actions:
        return actions
    blocks = _BLOCK.findall(text)
    if len(blocks) != 1:
        return []
    command = blocks[0].strip()
    if command == "submit" or command.startswith("submit\n"):
        note = _BLOCK.sub("", text).strip() or command[len("submit") :].strip()
        return [Action(kind="submit", note=note)]
    return [Action(kind="bash", command=command)]


def cut_output(text: str, head: int, tail: int) -> str:
    """Keep the head and tail of a long output, with a marker saying how much was cut."""
    if len(text) <= head + tail:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :] if tail else ''}"


def format_observation(exit_code: int, output: str, timed_out: bool, timeout: float) -> str:
    status = f"timed out after {timeout:g} s and was killed" if timed_out else f"exit code {exit_code}"
    return f"[{status}]\n{output}" if output else f"[{status}, no output]"


_NO_ACTION = (
    "No action found. Use the `bash` tool to run a command, or call `submit` when the fix is done "
    "(without tool calling: exactly one ```bash block per reply; a block holding only `submit` finishes)."
)


# ------------------------------------------------------------------------------------------- graph


class RepairState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int  # model calls so far
    submitted: bool
    note: str
    stop_reason: str  # submitted | step_limit | error | cancelled
    patch: str
    error: str
    pending: list[dict]  # actions of the last reply, waiting for `act`


def _sandbox():
    sandbox = get_runtime().context
    if sandbox is None:
        raise RuntimeError("the repair graph needs an open sandbox: invoke it with context=sandbox")
    return sandbox


def build_repair_graph(
    model: BaseChatModel,
    settings: RepairSettings | None = None,
    *,
    executor: ThreadPoolExecutor | None = None,
    model_step: Callable[[Runnable], Runnable] | None = None,
) -> StateGraph:
    """An uncompiled repair-agent graph; the sandbox is its runtime context (``invoke(..., context=sandbox)``).

    Input: ``{"messages": [...]}`` (see :func:`task_messages`). Output adds ``patch``, ``note``,
    ``stop_reason`` and ``steps``. Use :class:`RepairEpisode` to get the sandbox handled for you.
    ``model_step`` turns the tool-bound model into what each step calls (messages in, ``AIMessage`` out),
    e.g. a PaCoRe run per call (``per_call.PaCoReModelCall``); by default the bound model itself.
    """
    settings = settings or RepairSettings()
    runnable = _bound_model(model, settings)
    if model_step is not None:
        runnable = model_step(runnable)

    async def blocking(function: Callable, *args: Any) -> Any:
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
            update["messages"] = [reply, HumanMessage(_NO_ACTION)]
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
                output = cut_output(result.output, settings.output_head, settings.output_tail)
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


def _bound_model(model: BaseChatModel, settings: RepairSettings):
    if uses_tool_calling(model, settings):
        return model.bind_tools([BASH_TOOL, SUBMIT_TOOL]).bind(**settings.sampling)
    return model.bind(**settings.sampling) if settings.sampling else model


def _last_words(messages: list[BaseMessage], limit: int) -> str:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            text = _BLOCK.sub("", message_text(message)).strip()
            if text:
                return text[:limit]
    return ""


# ------------------------------------------------------------------------------------------- episode


class RepairEpisode:
    """One episode per call: open a fresh sandbox for the task, run the graph in it, always close it.

    ``ainvoke({"messages": [...], "task": row}, config)`` returns the graph's final state plus its
    ``record`` (see :func:`episode_record`). Errors inside the episode do not escape: they end the episode
    with ``stop_reason="error"`` and the messages so far, so a crashed episode is recorded, not lost.
    """

    def __init__(
        self,
        model: BaseChatModel,
        settings: RepairSettings | None = None,
        *,
        open_sandbox: Callable[[dict], Any] | None = None,
        model_step: Callable[[Runnable], Runnable] | None = None,
    ):
        self.settings = settings or RepairSettings()
        self.tool_calling = uses_tool_calling(model, self.settings)
        self.executor = ThreadPoolExecutor(self.settings.threads, thread_name_prefix="pacore-sandbox")
        graph = build_repair_graph(model, self.settings, executor=self.executor, model_step=model_step)
        self.graph = graph.compile(name="repair_agent")
        self._open = open_sandbox or self._default_open

    def _default_open(self, row: dict):
        from pacore_agents.swe.sandbox import open_sandbox

        return open_sandbox(row, self.settings.runtime)

    def messages_for(self, row: dict) -> list[BaseMessage]:
        return task_messages(row, tool_calling=self.tool_calling)

    async def ainvoke(self, graph_input: dict, config: RunnableConfig | None = None) -> dict[str, Any]:
        row = graph_input.get("task")
        if row is None:
            raise ValueError("a repair episode needs its task row: pass input['task']")
        started = time.monotonic()
        state: dict[str, Any] = {"messages": list(graph_input["messages"]), "steps": 0}
        sandbox = None
        try:
            sandbox = await self._open_sandbox(row)
            run_config: RunnableConfig = {**(config or {}), "recursion_limit": 3 * self.settings.step_limit + 10}
            async for values in self.graph.astream(state, run_config, stream_mode="values", context=sandbox):
                state = values
        except Exception as exc:  # the episode is over; say why and keep what it did
            state = {**state, "stop_reason": "error", "patch": "", "error": _describe(exc)}
        finally:
            if sandbox is not None:
                await self._close_sandbox(sandbox)
        record = episode_record(state, row, time.monotonic() - started)
        record["sandbox"] = _sandbox_identity(sandbox, self.settings.runtime)
        return {**state, "record": record}

    async def _open_sandbox(self, row: dict):
        """Open in a worker thread; if cancelled meanwhile, close the sandbox as soon as it exists."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, self._open, row)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_when_opened)
            raise

    async def _close_sandbox(self, sandbox) -> None:
        future = asyncio.get_running_loop().run_in_executor(self.executor, sandbox.close)
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            pass  # the close goes on in its thread; the caller is cancelled anyway

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


def _sandbox_identity(sandbox, runtime: str) -> dict[str, Any]:
    """Which sandbox ran the episode (a container id for docker), so a trace can be checked against it."""
    if sandbox is None:
        return {"runtime": runtime, "opened": False}
    return {
        "runtime": runtime,
        "opened": True,
        "id": getattr(sandbox, "container_id", None),
        "workdir": getattr(sandbox, "workdir", None),
    }


def _close_when_opened(future) -> None:
    if not future.cancelled() and future.exception() is None:
        with contextlib.suppress(Exception):
            future.result().close()


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[:4000]


def episode_record(state: dict, row: dict, seconds: float) -> dict[str, Any]:
    """Everything about one finished episode, JSON-ready: actions, outputs, tokens, patch, note."""
    messages = state.get("messages") or []
    prompt = completion = 0
    for message in messages:
        usage = getattr(message, "usage_metadata", None) or {}
        prompt += usage.get("input_tokens", 0)
        completion += usage.get("output_tokens", 0)
    return {
        "instance_id": row.get("instance_id"),
        "stop_reason": state.get("stop_reason") or "error",
        "steps": state.get("steps", 0),
        "patch": state.get("patch", ""),
        "note": state.get("note", ""),
        "error": state.get("error"),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "seconds": round(seconds, 3),
        "messages": [message_record(m) for m in messages],
    }


def message_record(message: BaseMessage) -> dict[str, Any]:
    """A message as plain JSON, tool calls and usage kept."""
    record: dict[str, Any] = {"role": message.type, "content": message_text(message)}
    if isinstance(message, AIMessage):
        if message.tool_calls:
            record["tool_calls"] = [
                {"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in message.tool_calls
            ]
        if message.usage_metadata:
            record["usage"] = dict(message.usage_metadata)
        reasoning = message.additional_kwargs.get("reasoning_content")
        if reasoning:
            record["reasoning"] = reasoning
    if isinstance(message, ToolMessage):
        record["tool_call_id"] = message.tool_call_id
    return record
