"""What one MultiChallenge run is: the choices that define its results, saved next to them.

A rerun into the same output folder resumes only when these match (the run folder's fingerprint is
:meth:`RunSettings.identity`); mixing rows produced by different models or schedules into one score would
silently corrupt it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# Fields that change what a result row means; the rest (workers, max_concurrency, limit, axis) only pick what to run
# and how fast.
IDENTITY_FIELDS = (
    "data",
    "base_url",
    "model",
    "judge_base_url",
    "judge_model",
    "judge_prompt",
    "rounds",
    "max_tokens",
    "judge_max_tokens",
    "temperature",
    "seed",
    "context_window",
)

PAPER_REFERENCE = {"baseline (RLVR-8B)": 33.3, "low [4]": 41.8, "medium [16]": 45.7, "high [32, 4]": 48.0}


class RunSettings(BaseModel):
    data: str
    output: str
    limit: int | None = None
    axis: str | None = None
    base_url: str | None = None  # None: the embedded model
    model: str | None = None
    judge_base_url: str | None = None  # None: the embedded model
    judge_model: str | None = None  # None: the judge server's first model
    judge_prompt: Literal["official", "project"] = "official"
    rounds: list[int] = Field(default_factory=lambda: [4])  # [] = plain single call
    preset: str | None = None  # for the report only; ``rounds`` is what runs
    samples: int = Field(default=1, ge=1)
    workers: int = Field(default=4, ge=1, description="conversations in flight")
    max_concurrency: int = Field(default=256, ge=1, description="model calls in flight over the whole run")
    max_tokens: int | None = None
    judge_max_tokens: int | None = None  # the official judge sends no limit
    judge_attempts: int = Field(default=3, ge=1)
    temperature: float = 1.0
    seed: int = 42
    context_window: int | None = None  # tokens; references are capped to fit before synthesis

    def schedule_label(self) -> str:
        if not self.rounds:
            return "plain single call (--rounds 0)"
        label = f"PaCoRe {self.rounds} + final 1"
        return f"{label} (preset {self.preset})" if self.preset else label

    def judge_is_responder(self) -> bool:
        """Same servers and the same model, or a model name left to the server that may be the same."""
        if self.judge_base_url != self.base_url:
            return False
        return self.judge_model is None or self.model is None or self.judge_model == self.model

    def identity(self) -> dict[str, Any]:
        return self.model_dump(include=set(IDENTITY_FIELDS))
