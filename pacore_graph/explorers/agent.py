"""One trajectory = one whole agent episode: any compiled graph or Runnable, run to completion.

Two ways to use an agent with PaCoRe:

- PaCoRe per model call (the paper's own agent protocol, as in its SWE-bench runs): put ``PaCoReNode``
  with a ``bind_tools`` model as the agent's model step (a ``ToolNode`` + ``tools_condition`` loop).
  Every step's K trajectories offer the tools; each conclusion shows its tool calls to the next round;
  the answer carries the final trajectory's tool calls, so the loop runs them.
- K whole episodes per round (this project's protocol, ``AgentExplorer``): each trajectory runs the
  agent from start to finish; ``output`` turns its final state into what the next round sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    BaseCallbackHandler,
    BaseCallbackManager,
    Callbacks,
    UsageMetadataCallbackHandler,
)
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import merge_configs

from pacore_graph.explorers.chat import trajectory_from_message
from pacore_graph.explorers.episode import EpisodeContext
from pacore_graph.records import Trajectory


def _default_input(messages: list[BaseMessage], episode: EpisodeContext) -> dict[str, Any]:
    return {"messages": messages}


class AgentExplorer:
    """Runs ``runnable`` once per trajectory on ``input(messages, episode)``.

    - ``output(final_state)``: the message (or text) the next round sees; usage is summed over the
      AIMessages of the final ``messages``.
    - ``record(final_state, episode)``: if given, its value goes to the run's record sink
      (``EpisodeContext.record``), e.g. a JSON-ready account of the episode.
    - ``isolate``: run each episode in a fresh ``contextvars.Context`` with only the episode's callbacks,
      tags and metadata, so that the agent's graph is not a subgraph of the PaCoRe graph. Without it, a
      compiled agent graph inherits the run's checkpointer and a resumed run continues a half-done
      episode: right for agents whose whole state is in the graph. An agent with outside state (a
      sandbox that a restart loses) needs ``isolate=True``, so an interrupted episode starts over.
    """

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        *,
        output: Callable[[Any], AIMessage | str],
        input: Callable[[list[BaseMessage], EpisodeContext], Any] | None = None,
        record: Callable[[Any, EpisodeContext], Any] | None = None,
        runnable_config: RunnableConfig | None = None,
        isolate: bool = False,
    ):
        self.runnable = runnable
        self.output = output
        self.input = input or _default_input
        self.record = record
        self.runnable_config = runnable_config
        self.isolate = isolate

    async def explore(self, messages: list[BaseMessage], episode: EpisodeContext) -> Trajectory:
        own = self.runnable_config
        run = merge_configs(own, episode.runnable_config) if own else episode.runnable_config
        spent = UsageMetadataCallbackHandler()  # what a failed episode's model calls cost (its state is gone)
        run = {**run, "callbacks": with_handler(run.get("callbacks"), spent)}
        episode_run = self.runnable.ainvoke(self.input(messages, episode), run)
        try:
            if self.isolate:
                state = await asyncio.create_task(episode_run, context=contextvars.Context())
            else:
                state = await episode_run
        except Exception as exc:
            if getattr(exc, "usage", None) is None and spent.usage_metadata:
                with contextlib.suppress(AttributeError):  # counted with the attempt (errors.reported_usage)
                    exc.usage = _openai_usage(spent)  # type: ignore[attr-defined]
            raise
        if self.record is not None:
            episode.record(self.record(state, episode))
        result = self.output(state)
        message = result if isinstance(result, AIMessage) else AIMessage(content=str(result))
        trajectory = trajectory_from_message(message, extra={"state": state})
        prompt, completion = _episode_usage(state)
        if completion is not None:
            trajectory.prompt_tokens, trajectory.completion_tokens = prompt, completion
        return trajectory


def with_handler(callbacks: Callbacks, handler: BaseCallbackHandler, *, inherit: bool = True) -> Callbacks:
    """``callbacks`` (none, a list or a manager) plus ``handler``; ``inherit``: the runs below see it too (else only
    the run these callbacks start). The original is left as it was. (``merge_configs`` would also pull in the
    config of the task running this.)"""
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
    elif inherit:
        return [*(callbacks or ()), handler]
    else:
        manager = AsyncCallbackManager(handlers=list(callbacks or ()), inheritable_handlers=list(callbacks or ()))
    manager.add_handler(handler, inherit=inherit)
    return manager


def _openai_usage(spent: UsageMetadataCallbackHandler) -> dict[str, int]:
    """The usage of every model call seen, in OpenAI's field names."""
    usages = spent.usage_metadata.values()
    return {
        "prompt_tokens": sum(usage.get("input_tokens", 0) for usage in usages),
        "completion_tokens": sum(usage.get("output_tokens", 0) for usage in usages),
    }


def _episode_usage(state: Any) -> tuple[int | None, int | None]:
    messages = state.get("messages") if isinstance(state, dict) else None
    if not messages:
        return None, None
    prompt = completion = 0
    seen = False
    for message in messages:
        usage = getattr(message, "usage_metadata", None)
        if usage:
            seen = True
            prompt += usage.get("input_tokens", 0)
            completion += usage.get("output_tokens", 0)
    return (prompt, completion) if seen else (None, None)
