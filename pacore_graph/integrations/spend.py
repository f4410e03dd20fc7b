"""What a PaCoRe tool may spend: its budgets per call and per agent thread, and the spend a thread has recorded.

The spend of a thread lives in the agent's own state (the ``pacore_spend`` key, one :class:`Spend` per tool name,
added up by :func:`add_spend`), so it is checkpointed with the conversation and survives a resume, whatever process
resumes it. Why the state and not a store: the spend then belongs to exactly the history it was spent in (a
checkpoint and its spend are written together, so a crash cannot record one without the other), it needs only the
checkpointer the agent already has, and a tool call's update reaches it through LangGraph's reducer, so parallel
calls add up instead of overwriting each other.

Parallel calls of one step all see the state from before the step. So the budget is shared out among them in a
fixed order (their order in the model's message): the first ``left_runs`` of them may run, and each gets an equal
share of the tokens left. The decision is a function of the state and the call alone, and a resumed step decides
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

SPEND_KEY = "pacore_spend"  # the agent state's key (PaCoReToolState declares it)


class Spend(TypedDict):
    """What one tool spent in one thread: effective TTC (completion tokens of every trajectory of every round,
    reasoning included) and PaCoRe runs."""

    tokens: int
    runs: int


NOTHING: Spend = {"tokens": 0, "runs": 0}


def add_spend(left: dict[str, Spend] | None, right: dict[str, Spend] | None) -> dict[str, Spend]:
    """The reducer of the state's ``pacore_spend``: each tool's spend added up (a call's update is its own spend)."""
    total = dict(left or {})
    for name, spend in (right or {}).items():
        before = total.get(name, NOTHING)
        total[name] = {"tokens": before["tokens"] + spend["tokens"], "runs": before["runs"] + spend["runs"]}
    return total


class BudgetRefused(Exception):
    """A call the budget does not allow; its text is the one line the calling model reads."""


@dataclass(frozen=True)
class ToolBudget:
    """Limits of a PaCoRe tool: tokens per call, tokens and runs per agent thread (None: no limit)."""

    call_tokens: int | None = None
    thread_tokens: int | None = None
    thread_runs: int | None = None

    def __post_init__(self) -> None:
        for name in ("call_tokens", "thread_tokens", "thread_runs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, not {value!r}")

    @property
    def per_thread(self) -> bool:
        """Whether a limit counts over the agent's thread (and so needs the thread's recorded spend)."""
        return self.thread_tokens is not None or self.thread_runs is not None

    def allowance(self, spent: Spend, position: int = 0, siblings: int = 1) -> int | None:
        """The token budget of this call (None: none), or :class:`BudgetRefused` before anything is sent.

        ``spent``: what the thread recorded before this step; ``position`` / ``siblings``: this call's place among
        the calls of this tool that the model asked for in the same message (they run in parallel)."""
        admitted = siblings
        if self.thread_runs is not None:
            runs_left = self.thread_runs - spent["runs"]
            if position >= runs_left:
                earlier = f", {position} more asked for before this call" if position else ""
                raise BudgetRefused(
                    f"refused: this conversation's PaCoRe runs are used up ({spent['runs']} of {self.thread_runs} "
                    f"done{earlier}); do not call this tool again, answer with what you have"
                )
            admitted = min(siblings, runs_left)
        cap = self.call_tokens
        if self.thread_tokens is not None:
            share = (self.thread_tokens - spent["tokens"]) // admitted
            if share < 1:
                raise BudgetRefused(
                    f"refused: the PaCoRe token budget of this conversation is spent ({spent['tokens']:,} of "
                    f"{self.thread_tokens:,} tokens); do not call this tool again, answer with what you have"
                )
            cap = share if cap is None else min(cap, share)
        return cap
