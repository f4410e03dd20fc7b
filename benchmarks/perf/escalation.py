"""``pacore bench escalation``: what an agent spends on the stronger model when a cheap model decides when to call
PaCoRe (``pacore_tool``), against PaCoRe on every model step (``PaCoReMiddleware``): the same tasks, the same
stronger model (the serving emulator), the same schedule.

A task is an agent episode: look up ``lookups`` facts with a tool, then answer a question. Some questions are easy
(a sum of two numbers), some hard (counting the ordered pairs of a product), ``hard_share`` of them, spread evenly.

- **escalation**: a cheap model runs the loop. It is scripted (its reply is a function of the conversation): it
  makes the lookups, answers an easy question itself, and hands a hard one to ``pacore_tool`` over the stronger
  model, then answers with what the tool said.
- **every step**: ``create_agent(strong, tools=[lookup], middleware=[same path, PaCoReMiddleware(config)])``: each
  model step is a PaCoRe run on the stronger model. A middleware placed before PaCoRe's forces the same path (a
  named ``tool_choice`` for each lookup, ``"none"`` for the answer), so both agents take the same steps.

Per arm: the stronger model's requests and completion tokens as the emulator counted them (its own count, every
request), the effective TTC the client accounted for (the tool's artifacts; the middleware's usage), the cheap
model's calls and tokens (estimated at four characters a token: it is a script), model steps and wall time. With
``tool_reasoning`` the emulator thinks before each forced tool call, as a reasoning model does (off: a call costs a
few tokens, a lower bound for every step's cost).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from pydantic import BaseModel, Field

from pacore_benchmarks.perf.bench_settings import BenchSettings
from pacore_benchmarks.perf.coordination import bench_emulator
from pacore_emulator import Emulator, EmulatorConfig
from pacore_graph import PaCoReConfig, PaCoReMiddleware, pacore_tool
from pacore_graph.models import OpenAICompatibleChatModel

ARMS = ("escalation", "every_step")
TOOL = "pacore"
_HARD = re.compile(r"how many ordered pairs", re.I)
_SUM = re.compile(r"what is (\d+) \+ (\d+)\?", re.I)


def escalation_emulator() -> EmulatorConfig:
    """The coordination benchmark's replies (400 to 4000 reasoning tokens), a reasoning model's tool calls."""
    return bench_emulator().model_copy(update={"token_delay": 0.0005, "tool_call_reasoning": True})


class EscalationSettings(BenchSettings):
    tasks: int = Field(20, ge=1)
    hard_share: float = Field(
        0.25, ge=0, le=1, description="share of the tasks whose question the cheap model escalates"
    )
    lookups: int = Field(2, ge=0, description="tool steps of each task before its answer")
    schedules: list[list[int]] = Field(
        default_factory=lambda: [[4], [16]], description="PaCoRe schedules, one row each"
    )
    concurrency: int = Field(8, ge=1, description="tasks in flight")
    emulator: EmulatorConfig = Field(default_factory=escalation_emulator)

    @classmethod
    def quick_defaults(cls) -> dict[str, Any]:
        """8 tasks, preset low: well under a minute."""
        return {"tasks": 8, "schedules": [[4]]}


def is_hard(index: int, share: float) -> bool:
    """Exactly round(tasks * share) hard tasks (up to rounding), spread evenly over the list."""
    return int((index + 1) * share) > int(index * share)


def task_text(index: int, settings: EscalationSettings) -> str:
    if is_hard(index, settings.hard_share):
        question = f"how many ordered pairs (a, b) of positive integers satisfy a * b = {index + 12}?"
    else:
        question = f"what is {index + 3} + {2 * index + 5}?"
    facts = f"look up {settings.lookups} facts about item {index} with the lookup tool"
    return f"Task {index}: {facts}, then answer: {question}"


class CheapModel(BaseChatModel):
    """The cheap model of the escalation arm: lookups, then an easy answer or one PaCoRe call (a script)."""

    lookups: int

    @property
    def _llm_type(self) -> str:
        return "scripted-cheap"

    def bind_tools(self, tools: Any, **kwargs: Any) -> CheapModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        task = next(m for m in reversed(messages) if isinstance(m, HumanMessage)).text
        item = int(re.search(r"item (\d+)", task).group(1))  # type: ignore[union-attr]
        results = [m for m in messages if isinstance(m, ToolMessage)]
        looked_up = sum(1 for m in results if m.name == "lookup")
        escalated = [m for m in results if m.name == TOOL]
        if looked_up < self.lookups:
            reply = AIMessage("", tool_calls=[call("lookup", {"item": item}, f"lookup-{item}-{looked_up}")])
        elif escalated:
            reply = AIMessage(f"The answer, from PaCoRe: {escalated[-1].text}")
        elif _HARD.search(task):
            question = task.split("then answer: ", 1)[1]
            reply = AIMessage("", tool_calls=[call(TOOL, {"question": question}, f"pacore-{item}")])
        else:
            a, b = map(int, _SUM.search(task).groups())  # type: ignore[union-attr]
            reply = AIMessage(f"The answer is \\boxed{{{a + b}}}.")
        reply.usage_metadata = {
            "input_tokens": sum(len(m.text) for m in messages) // 4,
            "output_tokens": max(1, (len(reply.text) + len(json.dumps(reply.tool_calls))) // 4),
            "total_tokens": 0,
        }
        return ChatResult(generations=[ChatGeneration(message=reply)])


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


@tool
def lookup(item: int) -> str:
    """A fact about an item."""
    return f"item {item} is a positive integer"


class SamePath(AgentMiddleware):
    """The every-step arm's path: ``lookups`` lookups, then the answer (the escalation arm's agent's path). Placed
    before ``PaCoReMiddleware``, so every trajectory of a step is given the same ``tool_choice``."""

    def __init__(self, lookups: int):
        super().__init__()
        self.lookups = lookups

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        done = sum(1 for m in request.messages if isinstance(m, ToolMessage))
        return await handler(request.override(tool_choice="lookup" if done < self.lookups else "none"))


class ArmRun(BaseModel):
    arm: str
    schedule: list[int]
    tasks: int
    hard: int
    strong_requests: int = Field(description="requests the stronger model (the emulator) received")
    strong_tokens: int = Field(description="completion tokens the emulator generated, cut requests up to their cut")
    strong_ttc: int = Field(
        description="effective TTC the client accounted for: the tool's artifacts, the middleware's usage"
    )
    cheap_calls: int
    cheap_tokens: int = Field(description="the scripted cheap model's completion tokens, four characters a token")
    model_steps: int = Field(description="the agent's model steps over all tasks")
    wall_s: float


async def run_arm(
    arm: str,
    schedule: list[int],
    settings: EscalationSettings,
    emulator: Emulator,
    on_task: Callable[[str, int, int], None] | None = None,
) -> ArmRun:
    """Every task under one arm, against the freshly reset emulator."""
    emulator.reset()
    strong = OpenAICompatibleChatModel(base_url=emulator.base_url, model=emulator.config.model)
    config = PaCoReConfig(rounds=schedule, spaced_gc=True, max_concurrency=settings.concurrency * (max(schedule) + 1))
    if arm == "escalation":
        cheap = CheapModel(lookups=settings.lookups)
        tools: list[BaseTool] = [lookup, pacore_tool(strong, config, name=TOOL)]
        agent = create_agent(cheap, tools=tools)
    else:
        agent = create_agent(strong, tools=[lookup], middleware=[SamePath(settings.lookups), PaCoReMiddleware(config)])
    slots = asyncio.Semaphore(settings.concurrency)
    finished = 0

    async def episode(index: int) -> list[BaseMessage]:
        nonlocal finished
        async with slots:
            out = await agent.ainvoke({"messages": [HumanMessage(task_text(index, settings))]})
        finished += 1
        if on_task is not None:
            on_task(arm, finished, settings.tasks)
        messages: list[BaseMessage] = out["messages"]
        return messages

    started = time.monotonic()
    try:
        episodes = await asyncio.gather(*(episode(index) for index in range(settings.tasks)))
    finally:
        await strong.aclose()
    wall = time.monotonic() - started
    stats = await asyncio.to_thread(emulator.stats)
    answers = [m for messages in episodes for m in messages if isinstance(m, AIMessage)]
    tool_results = [m for messages in episodes for m in messages if isinstance(m, ToolMessage) and m.name == TOOL]
    tokens = [m.usage_metadata["output_tokens"] if m.usage_metadata else 0 for m in answers]
    escalating = arm == "escalation"  # its model steps are the cheap model's; every step's are PaCoRe runs
    strong_ttc = sum(m.artifact["ttc"] for m in tool_results) if escalating else sum(tokens)
    return ArmRun(
        arm=arm,
        schedule=schedule,
        tasks=settings.tasks,
        hard=sum(is_hard(index, settings.hard_share) for index in range(settings.tasks)),
        strong_requests=stats["requests"],
        strong_tokens=stats["completion_tokens"] + stats["cancelled_tokens"],
        strong_ttc=strong_ttc,
        cheap_calls=len(answers) if escalating else 0,
        cheap_tokens=sum(tokens) if escalating else 0,
        model_steps=len(answers),
        wall_s=round(wall, 2),
    )


class EscalationReport(BaseModel):
    settings: EscalationSettings
    runs: list[ArmRun]

    def run(self, arm: str, schedule: list[int]) -> ArmRun:
        return next(run for run in self.runs if run.arm == arm and run.schedule == schedule)

    def ratio(self, schedule: list[int]) -> float:
        """How many times the escalating agent's strong tokens every step's PaCoRe spends."""
        escalation = self.run("escalation", schedule).strong_tokens
        return round(self.run("every_step", schedule).strong_tokens / escalation, 2) if escalation else 0.0

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``pacore bench escalation`` prints last."""
        rows = {
            json.dumps(schedule): {
                "strong_tokens_ratio": self.ratio(schedule),
                **{
                    run.arm: run.model_dump(exclude={"arm", "schedule", "tasks", "hard"})
                    for run in self.runs
                    if run.schedule == schedule
                },
            }
            for schedule in self.settings.schedules
        }
        return {
            "strong_tokens_ratio": self.ratio(self.settings.schedules[0]),
            "tasks": self.settings.tasks,
            "hard_tasks": self.runs[0].hard if self.runs else 0,
            "lookups": self.settings.lookups,
            "tool_reasoning": self.settings.emulator.tool_call_reasoning,
            "schedules": rows,
        }


async def run_benchmark(
    settings: EscalationSettings,
    on_run: Callable[[ArmRun], None] | None = None,
    on_task: Callable[[str, int, int], None] | None = None,
) -> EscalationReport:
    """Both arms for each schedule, on one emulator reset before each."""
    report = EscalationReport(settings=settings, runs=[])
    with Emulator(settings.emulator) as emulator:
        for schedule in settings.schedules:
            for arm in ARMS:
                run = await run_arm(arm, schedule, settings, emulator, on_task)
                report.runs.append(run)
                if on_run is not None:
                    on_run(run)
    return report
