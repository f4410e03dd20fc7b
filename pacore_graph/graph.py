"""The PaCoRe StateGraph: K trajectories fanned out with Send, a collector compacts them.

    START -> begin --Send x K--> trajectory -> collect --Send x K--> trajectory -> collect ... -> END

Each trajectory is one task (several nodes per trajectory would advance in lockstep with the slowest
branch). The next round is fanned out straight from ``collect``: a separate controller node would cost
one more superstep (and checkpoint) per round. State holds the caller's messages, the previous round's
conclusions and small per-trajectory records: never reasoning or whole trajectories, which go to a
trace only when asked for.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Overwrite, Send

from pacore_graph.accounting import completion_tokens
from pacore_graph.compaction import compact
from pacore_graph.config import PaCoReConfig
from pacore_graph.context import fit_references
from pacore_graph.errors import RoundFailedError
from pacore_graph.explorer import Explorer, as_explorer
from pacore_graph.limits import ConcurrencyLimiter
from pacore_graph.prompt import last_user_index, order_references, synthesis_messages
from pacore_graph.records import RoundRecord, Trajectory, TrajectoryRecord
from pacore_graph.retry import with_retries

TRACE_KEY = "pacore_trace"  # configurable key: a list that receives every full Trajectory
EVENTS_KEY = "pacore_events"  # configurable key: a callable that receives every progress event


class PaCoReState(TypedDict, total=False):
    messages: list[AnyMessage]  # the caller's messages, unchanged across rounds
    round_index: int
    references: list[str]  # the previous round's conclusions, in template order
    results: Annotated[list[TrajectoryRecord], operator.add]  # this round's records (reset each round)
    rounds: Annotated[list[RoundRecord], operator.add]
    answer: AIMessage


class TrajectoryTask(TypedDict):
    """The Send argument: indices plus the round's messages (one shared list object for all K)."""

    messages: list[BaseMessage]
    round_index: int
    index: int


def _emit(event: dict[str, Any], config: RunnableConfig) -> None:
    """Send a progress event to the run's listener, else to LangGraph's custom stream.

    A listener in ``configurable`` (what PaCoReRunner and PaCoReNode use) costs next to nothing; LangGraph's
    custom stream mode costs about 0.2 ms of client CPU per event, which adds up at K events a round.
    """
    listener = (config.get("configurable") or {}).get(EVENTS_KEY)
    if listener is not None:
        listener(event)
        return
    try:
        get_stream_writer()(event)
    except RuntimeError:  # called outside a graph run
        pass


def build_pacore_graph(
    model_or_explorer: Any,
    config: PaCoReConfig | None = None,
    *,
    limiter: ConcurrencyLimiter | None = None,
) -> StateGraph:
    """An uncompiled StateGraph running PaCoRe over ``messages``; compile with your own checkpointer.

    Input: ``{"messages": [...]}``. Output adds ``answer`` (an AIMessage) and ``rounds``.
    """
    settings = config or PaCoReConfig()  # `config` is LangGraph's name for the RunnableConfig below
    explorer: Explorer = as_explorer(model_or_explorer, settings)
    limiter = limiter or ConcurrencyLimiter(settings.max_concurrency)
    schedule = settings.schedule

    # Every node and router is async: LangGraph runs sync ones through a thread pool.
    async def begin(state: PaCoReState, config: RunnableConfig) -> dict[str, Any]:
        """A new input starts at round 1, also on a thread that already ran (checkpointer, next turn)."""
        if len(schedule) > 1:
            last_user_index(state["messages"])  # fail now, not after round 1 was paid for
        announce(0, config)
        return {"round_index": 0, "references": [], "results": Overwrite([]), "rounds": Overwrite([])}

    def announce(round_index: int, config: RunnableConfig) -> None:
        started = {"event": "round_started", "round": round_index, "k": schedule[round_index], "rounds": len(schedule)}
        _emit(started, config)

    async def fan_out(state: PaCoReState) -> list[Send] | str:
        """The Send tasks of the round ``state["round_index"]`` names, or END after the final round."""
        round_index = state["round_index"]
        if round_index == len(schedule):
            return END
        messages = state["messages"]
        if round_index > 0:
            references = fit_references(state["references"], messages, settings)
            messages = synthesis_messages(messages, references, settings.template)
        return [
            Send("trajectory", TrajectoryTask(messages=messages, round_index=round_index, index=index))
            for index in range(schedule[round_index])
        ]

    async def trajectory(task: TrajectoryTask, config: RunnableConfig) -> dict[str, Any]:
        """One trajectory, retried on transient failures; a final failure is recorded, never raised."""
        round_index, index, messages = task["round_index"], task["index"], task["messages"]

        async def attempt() -> Trajectory:
            return await explorer.explore(messages, round_index=round_index, index=index)

        try:
            outcome, attempts = await with_retries(
                attempt, settings.retry, settings.request_timeout, slot=limiter.semaphore()
            )
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
            attempts = getattr(exc, "pacore_attempts", 1)
            _emit({"event": "trajectory_failed", "round": round_index, "index": index, "error": error}, config)
            return {"results": [TrajectoryRecord(round_index=round_index, index=index, error=error, attempts=attempts)]}
        record = _record(outcome, round_index, index, attempts, settings)
        trace = (config.get("configurable") or {}).get(TRACE_KEY)
        if trace is not None:
            outcome.extra.setdefault("round_index", round_index)
            outcome.extra.setdefault("index", index)
            trace.append(outcome)
        _emit(
            {
                "event": "trajectory_finished",
                "round": round_index,
                "index": index,
                "completion_tokens": record.completion_tokens,
                "truncated": record.truncated,
            },
            config,
        )
        return {"results": [record]}

    async def collect(state: PaCoReState, config: RunnableConfig) -> dict[str, Any]:
        """Order and compact the round; after the final round its one conclusion is the answer."""
        round_index = state["round_index"]
        records = sorted(state.get("results", []), key=lambda record: record.index)
        order = order_references([r.content_length for r in records], settings.seed, settings.reference_order)
        references = [records[position].conclusion for position in order if records[position].usable]
        round_record = RoundRecord(
            round_index=round_index, k=schedule[round_index], references=references, trajectories=records
        )
        _emit(
            {
                "event": "round_finished",
                "round": round_index,
                "k": round_record.k,
                "completion_tokens": round_record.completion_tokens,
                "failed": len(round_record.failures),
            },
            config,
        )
        if not references:
            raise RoundFailedError(_no_references_message(round_record))
        update = {
            "results": Overwrite([]),
            "rounds": [round_record],
            "references": references,
            "round_index": round_index + 1,
        }
        if round_index + 1 == len(schedule):
            update["answer"] = AIMessage(content=references[0], name="pacore")
        else:
            announce(round_index + 1, config)
        return update

    builder = StateGraph(PaCoReState)
    builder.add_node("begin", begin)
    builder.add_node("trajectory", trajectory)
    builder.add_node("collect", collect)
    builder.add_edge(START, "begin")
    builder.add_conditional_edges("begin", fan_out, ["trajectory"])
    builder.add_edge("trajectory", "collect")
    builder.add_conditional_edges("collect", fan_out, ["trajectory", END])
    return builder


def _record(
    outcome: Trajectory, round_index: int, index: int, attempts: int, config: PaCoReConfig
) -> TrajectoryRecord:
    compacted = compact(outcome.content, outcome.reasoning, outcome.finish_reason)
    conclusion = compacted.conclusion if compacted.conclusion.strip() else ""
    if not conclusion and compacted.truncated and config.truncated_policy == "keep":
        conclusion = outcome.content  # the reference pipeline passes such raw text on
    tokens, approximate = completion_tokens(outcome.completion_tokens, outcome.content, outcome.reasoning)
    return TrajectoryRecord(
        round_index=round_index,
        index=index,
        conclusion=conclusion,
        content_length=len(outcome.content),
        prompt_tokens=outcome.prompt_tokens or 0,
        completion_tokens=tokens,
        tokens_approximate=approximate,
        finish_reason=outcome.finish_reason,
        truncated=compacted.truncated,
        attempts=attempts,
    )


def _no_references_message(round_record: RoundRecord) -> str:
    reasons = []
    for record in round_record.trajectories:
        if record.failed:
            reasons.append(f"#{record.index} failed after {record.attempts} attempt(s): {record.error}")
        elif record.truncated:
            reasons.append(f"#{record.index} was cut off by the length limit before any conclusion")
        else:
            reasons.append(f"#{record.index} returned an empty conclusion")
    shown = "; ".join(reasons[:5]) + (f"; ... ({len(reasons) - 5} more)" if len(reasons) > 5 else "")
    return (
        f"round {round_record.round_index + 1}: none of its {round_record.k} trajectories produced a usable "
        f"conclusion, so there is nothing to pass on: {shown}"
    )
