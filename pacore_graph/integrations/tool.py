"""``pacore_tool``: PaCoRe as a tool the agent decides to call, with budgets per call and per agent thread.

Escalation: a cheap model runs the agent's loop and hands the hard, self-contained sub-question to PaCoRe on a
stronger model only when it needs to, instead of paying sum(K) + 1 strong calls on every step
(``PaCoReChatModel``, ``PaCoReMiddleware``). One call is one PaCoRe run, on the same runner as ``PaCoReNode``.

- The agent's context gets the answer only; the artifact (``response_format="content_and_artifact"``) carries
  the rounds' counts, effective TTC, the call's token budget and the thread's spend.
- Budgets (:mod:`.spend`): a call past the budget is refused in one line the model reads as a tool error, before
  anything is sent. The thread's spend is in the agent's state, so it is checkpointed with the conversation and
  survives a resume: under its own key when the agent's state has one (``PaCoReToolState``), else in the tool's
  own messages of the thread (each call's artifact holds its spend). Each call runs with what it may still spend
  as its token budget (``PaCoReConfig.budget``): once its finished trajectories reach it, the rest are cancelled
  and no round starts.
- A citizen of the graph: cancelling the agent's run cancels the trajectories (their requests closed); progress
  events (round started, trajectory finished, round finished) go to the agent's ``stream_mode="custom"``, marked
  with the tool's name and call id; the agent's callbacks, tags and metadata reach every trajectory's model run
  (tagged ``nostream``: a messages stream shows the agent's own model, not the proposals); inside a checkpointed
  agent the run keeps checkpoints with its saver on a thread of its own, so a resumed step re-sends only the
  trajectories that had not finished. Sync and async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import set_config_context
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.types import Command
from pydantic import BaseModel, Field, PrivateAttr, SkipValidation

from pacore_graph.concurrency.limiter import ConcurrencyLimiter
from pacore_graph.concurrency.sync import run_sync
from pacore_graph.config import Budget, PaCoReConfig
from pacore_graph.errors import BudgetExhaustedError, PaCoReError, RoundFailedError
from pacore_graph.explorers.panel import Models
from pacore_graph.graph.own_thread import lent_saver
from pacore_graph.graph.run_state import ProgressListener
from pacore_graph.graph.runner import PaCoReRunner
from pacore_graph.inputs import one_line, question_message
from pacore_graph.integrations.spend import NOTHING, SPEND_KEY, BudgetRefused, Spend, ToolBudget
from pacore_graph.records import PaCoReResult

DEFAULT_NAME = "pacore"
DESCRIPTION = (
    "Hands one hard, self-contained question to a stronger reasoning process: {k} solutions by a stronger model "
    "in parallel, then a synthesis of them ({calls} model calls: slow and costly). Call it only for a sub-problem "
    "you cannot answer reliably yourself (multi-step math, tricky code or logic, a subtle judgement); answer easy "
    "questions yourself. It does not see this conversation: put everything it needs into question and context. "
    "It returns its answer."
)
NO_THREAD = (
    "thread_tokens and thread_runs count over an agent's thread, and this call has none: give the tool to an agent "
    "(create_agent, a ToolNode), or set only call_tokens"
)


class PaCoReToolInput(BaseModel):
    """What the calling model fills in (``runtime`` is LangChain's, injected by the agent's tool node)."""

    question: str = Field(description="the question, complete: the solver does not see this conversation")
    context: str | None = Field(
        None, description="facts, code, data or partial work the question needs, if any (optional)"
    )
    runtime: Annotated[Any, InjectedToolArg] = None


class PaCoReTool(BaseTool):
    """One call = one PaCoRe run over ``question`` (and ``context``) on the tool's model; see the module's docstring."""

    name: str = DEFAULT_NAME
    description: str = ""
    args_schema: type[BaseModel] = PaCoReToolInput
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True  # a refusal or failed run is a tool error the model reads, not a crash

    model: SkipValidation[Models] = Field(
        exclude=True, description="the stronger model (or an explorer, or a panel's models by name)"
    )
    config: PaCoReConfig = Field(default_factory=PaCoReConfig)
    budget: ToolBudget = Field(default_factory=ToolBudget)

    _limiter: ConcurrencyLimiter = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        if not self.description:
            k = " then ".join(map(str, self.config.rounds)) or "one"
            self.description = DESCRIPTION.format(k=k, calls=sum(self.config.schedule))
        self._limiter = ConcurrencyLimiter(self.config.max_concurrency)  # one bound for all its calls

    def _run(
        self,
        question: str,
        context: str | None = None,
        runtime: Any = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[Any, Any]:
        return run_sync(self._solve(question, context, runtime, run_manager))

    async def _arun(
        self,
        question: str,
        context: str | None = None,
        runtime: Any = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[Any, Any]:
        return await self._solve(question, context, runtime, run_manager)

    async def _solve(
        self,
        question: str,
        context: str | None,
        runtime: Any,
        run_manager: AsyncCallbackManagerForToolRun | CallbackManagerForToolRun | None,
    ) -> tuple[Any, Any]:
        """Checks the call (one line to the model when refused), runs it, and returns the answer with its artifact;
        inside an agent whose state keeps spend, as a Command that also records the call's spend."""
        if not question.strip():
            raise ToolException("refused: the question is empty; put the whole question into question")
        state = getattr(runtime, "state", None)
        tool_call_id = getattr(runtime, "tool_call_id", None)
        spent, kept = thread_spend(state, self.name)
        if spent is None and self.budget.per_thread:
            raise ValueError(NO_THREAD)
        position, siblings = sibling_calls(state, tool_call_id, self.name)
        try:
            tokens = self.budget.allowance(spent or NOTHING, position, siblings)
        except BudgetRefused as exc:
            raise ToolException(str(exc)) from None
        config = self.config
        if tokens is not None:
            limit = min(tokens, self.config.budget.tokens or tokens)
            config = config.model_copy(update={"budget": Budget(tokens=limit, seconds=config.budget.seconds)})
        runner = PaCoReRunner(self.model, config, limiter=self._limiter)
        progress = progress_listener(runtime, self.name, tool_call_id)
        try:
            result = await self._run_isolated(runner, question_message(question, context), run_manager, progress)
        except PaCoReError as exc:
            text = f"failed: {one_line(str(exc), 400)}"
            if tool_call_id is None:
                raise ToolException(text) from None
            spend = failed_spend(exc)
            artifact: dict[str, Any] = {"ttc": spend, "error": text}
            return self._reply(text, artifact, tool_call_id, spent, kept, status="error"), None
        artifact = {**result.accounting(full=False), "budget_tokens": tokens, "calls": calls(result)}
        if tool_call_id is None:
            return result.answer, artifact
        return self._reply(result.answer, artifact, tool_call_id, spent, kept), None

    async def _run_isolated(
        self,
        runner: PaCoReRunner,
        message: HumanMessage,
        run_manager: AsyncCallbackManagerForToolRun | CallbackManagerForToolRun | None,
        progress: ProgressListener | None,
    ) -> PaCoReResult:
        """One PaCoRe run whose model calls are children of this tool's run (callbacks, tags, metadata), a run of its
        own rather than a subgraph of the agent (it checkpoints with the agent's saver on a thread of its own)."""
        caller = ensure_config()  # the tool's config: the agent's saver and thread, when checkpointed
        run_config: RunnableConfig = {
            "callbacks": run_manager.get_child() if run_manager is not None else None,
            "tags": [TAG_NOSTREAM],  # the agent's messages stream shows its own model, not the proposals
        }
        if lent_saver(caller) is not None:
            run_config["configurable"] = caller["configurable"]
        with set_config_context(run_config) as context:
            run = runner.arun([message], run_config, on_event=progress)
            return await asyncio.get_running_loop().create_task(run, context=context)

    def _reply(
        self,
        content: str,
        artifact: dict[str, Any],
        tool_call_id: str,
        spent: Spend | None,
        kept: bool,
        status: Literal["success", "error"] = "success",
    ) -> ToolMessage | Command[Any]:
        """The tool's message, its artifact holding the call's spend (``ttc``) and the thread's after it; where the
        agent's state keeps spend under its own key, with the call's spend added there in the same update."""
        if spent is not None:
            artifact["thread"] = after(spent, artifact["ttc"])
        message = ToolMessage(content, artifact=artifact, tool_call_id=tool_call_id, name=self.name, status=status)
        if not kept:
            return message
        spend: Spend = {"tokens": artifact["ttc"], "runs": 1}
        return Command(update={"messages": [message], SPEND_KEY: {self.name: spend}})


def pacore_tool(
    model: Models,
    config: PaCoReConfig | None = None,
    *,
    name: str = DEFAULT_NAME,
    description: str | None = None,
    call_tokens: int | None = None,
    thread_tokens: int | None = None,
    thread_runs: int | None = None,
) -> PaCoReTool:
    """PaCoRe over ``model`` (the stronger model) as a LangChain tool an agent can be given:
    ``create_agent(cheap_model, tools=[pacore_tool(strong_model, PaCoReConfig.preset("medium"))])``.

    ``name`` and ``description`` are what the calling model sees (the default description says when to call it).
    Budgets, each None for none: ``call_tokens`` effective TTC per call; ``thread_tokens`` and ``thread_runs``
    per agent thread, counted in the agent's state (the tool's messages; ``state_schema=PaCoReToolState`` keeps
    them under a key of their own, which trimming or summarising the history does not touch). A call past a
    budget is refused in one line the model reads, before anything is sent.
    """
    budget = ToolBudget(call_tokens=call_tokens, thread_tokens=thread_tokens, thread_runs=thread_runs)
    return PaCoReTool(
        model=model, config=config or PaCoReConfig(), name=name, description=description or "", budget=budget
    )


def thread_spend(state: Any, name: str) -> tuple[Spend | None, bool]:
    """What tool ``name`` spent in this agent thread, and whether the state keeps it under its own key.

    The state's ``pacore_spend`` key (``PaCoReToolState``) when it has one; else the tool's own messages in the
    thread, whose artifacts hold each run's spend (a history trimmed or summarised forgets what it drops: hence the
    key). (None, False) outside an agent: no state, no thread."""
    found = field(state, SPEND_KEY)
    if isinstance(found, Mapping):
        spend: Spend = found.get(name, NOTHING)
        return spend, True
    messages = field(state, "messages")
    if messages is None:
        return None, False
    runs = [
        m.artifact
        for m in messages
        if isinstance(m, ToolMessage) and m.name == name and isinstance(m.artifact, Mapping) and "ttc" in m.artifact
    ]
    return {"tokens": sum(int(run["ttc"]) for run in runs), "runs": len(runs)}, False


def sibling_calls(state: Any, tool_call_id: str | None, name: str) -> tuple[int, int]:
    """This call's position among the calls of tool ``name`` in the model message that made it, and their number
    (they run in parallel, all seeing the state from before them); (0, 1) when it is not found."""
    for message in reversed(field(state, "messages") or ()):
        if isinstance(message, AIMessage) and any(call.get("id") == tool_call_id for call in message.tool_calls):
            ids = [call.get("id") for call in message.tool_calls if call["name"] == name]
            return (ids.index(tool_call_id), len(ids)) if tool_call_id in ids else (0, 1)
    return 0, 1


def field(state: Any, key: str) -> Any:
    """A key of the agent's state: a dict state's item, a dataclass or pydantic state's attribute (None if absent)."""
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


def progress_listener(runtime: Any, name: str, tool_call_id: str | None) -> ProgressListener | None:
    """Progress events to the agent's custom stream, each marked with the tool's name and call id."""
    writer = getattr(runtime, "stream_writer", None)
    if writer is None:
        try:
            writer = get_stream_writer()
        except (RuntimeError, KeyError):  # not inside a graph run (KeyError: inside a plain runnable's run)
            return None

    def emit(event: dict[str, Any]) -> None:
        writer({"tool": name, "tool_call_id": tool_call_id, **event})

    return emit


def failed_spend(error: PaCoReError) -> int:
    """What a failed run had spent (its finished trajectories' completion tokens), as far as the error says."""
    if isinstance(error, RoundFailedError):
        return error.completion_tokens
    if isinstance(error, BudgetExhaustedError):
        return error.round.completion_tokens
    return 0


def after(spent: Spend, tokens: int) -> Spend:
    return {"tokens": spent["tokens"] + tokens, "runs": spent["runs"] + 1}


def calls(result: PaCoReResult) -> int:
    """Model calls the run made: every trajectory of every round."""
    return sum(len(r.trajectories) for r in result.rounds)
