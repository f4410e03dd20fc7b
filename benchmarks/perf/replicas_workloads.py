"""The problems ``pacore bench replicas`` sends: the batch PaCoRe workload, and the chat and agent workload.

- ``pacore``: P problems with [32, 4] and P with [16], each a short question. The synthesis prompts (up to
  32 conclusions of 500 to 3600 tokens) are what is long; the headline figure is measured on it.
- ``one``: [32, 4] problems solved one after another, each alone on the cluster: a chat bot's PaCoReNode with
  one user, where idle replicas are free and latency is what counts.
- ``chat``: what this project's users run besides: P MultiChallenge-like conversations ([16], medium), a few
  thousand tokens of history before the last user turn, and P agent steps ([4], low, as SWE-bench runs):
  a long system prompt every step shares, the task, then tool calls and their outputs. Every round of a
  problem keeps what precedes its last user turn, so that prefix is worth finding again where it was cached.

Texts are deterministic filler (the emulator counts about four characters a token); every problem is
distinct, except the agent system prompt, which all agent steps share as one agent's would.
"""

from __future__ import annotations

import random

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from pacore_emulator.replies import VOCAB
from pacore_graph import Problem

Workload = list[tuple[list[int], Problem]]  # (schedule, problem), all sent at once

PACORE = "pacore"
ONE = "one"  # solved one after another
CHAT = "chat"
CONVERSATION_SCHEDULE = [16]
AGENT_SCHEDULE = [4]
HISTORY_TURNS = [(150, 850), (250, 900), (120, 700)]  # (user, assistant) tokens: about 3000 tokens of history
AGENT_SYSTEM_TOKENS = 2500  # instructions and tool descriptions
AGENT_TASK_TOKENS = 300
AGENT_STEPS = [(40, 700), (30, 400), (50, 900), (30, 300), (40, 600)]  # (tool call, tool output) tokens


def filler(seed: str, tokens: int) -> str:
    """About ``tokens`` tokens of words, the same for the same seed."""
    rng = random.Random(seed)
    words, size = [], 0
    while size < tokens * 4:
        word = rng.choice(VOCAB)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def pacore_workload(problems: int, schedules: list[list[int]]) -> Workload:
    """The batch workload: short distinct problems (the emulator derives every reply from the prompt)."""
    return [
        (
            schedule,
            Problem(
                id=f"{'-'.join(map(str, schedule))}:{n}",
                messages=f"Problem {n} for {schedule}: how many pairs (a, b) with a + b = {n + 7}?",
            ),
        )
        for schedule in schedules
        for n in range(problems)
    ]


def conversation(n: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage("You are a helpful assistant. Keep to what the user asked.")]
    for turn, (user, assistant) in enumerate(HISTORY_TURNS):
        messages.append(HumanMessage(f"Conversation {n}, turn {turn}: " + filler(f"user {n} {turn}", user)))
        messages.append(AIMessage(filler(f"assistant {n} {turn}", assistant)))
    messages.append(HumanMessage(f"Conversation {n}: so how many pairs (a, b) have a + b = {n + 11}?"))
    return messages


def agent_step(n: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = [
        SystemMessage("You are a software engineering agent. " + filler("agent system prompt", AGENT_SYSTEM_TOKENS)),
        HumanMessage(f"Task {n}: fix the failing test. " + filler(f"task {n}", AGENT_TASK_TOKENS)),
    ]
    for step, (call, output) in enumerate(AGENT_STEPS):
        call_id = f"call_{n}_{step}"
        command = filler(f"command {n} {step}", call)
        messages.append(AIMessage("", tool_calls=[{"name": "bash", "args": {"command": command}, "id": call_id}]))
        messages.append(ToolMessage(filler(f"output {n} {step}", output), tool_call_id=call_id))
    return messages


def chat_workload(problems: int) -> Workload:
    """P conversations and P agent steps."""
    conversations = [
        (CONVERSATION_SCHEDULE, Problem(id=f"conversation:{n}", messages=conversation(n))) for n in range(problems)
    ]
    return conversations + [(AGENT_SCHEDULE, Problem(id=f"agent:{n}", messages=agent_step(n))) for n in range(problems)]
