"""Configuration of one PaCoRe run: the schedule, sampling, references, retries and limits."""

from __future__ import annotations

from typing import Any, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pacore_graph.coordination.answers import extractor_name
from pacore_graph.coordination.settings import Budget, EarlyStop
from pacore_graph.coordination.templates import VERIFIER_TEMPLATE
from pacore_graph.synthesis.prompt import DEFAULT_TEMPLATE

PRESETS: dict[str, list[int]] = {"low": [4], "medium": [16], "high": [32, 4]}
# The largest schedule the commands (--rounds) and the endpoint run: far beyond the paper's (at most 32 per round,
# 2 rounds), small enough that a typo (--rounds 1000000) is refused instead of building a million-branch run.
MAX_ROUNDS = 8
MAX_TRAJECTORIES_PER_ROUND = 1024


class RetryPolicy(BaseModel):
    """Retries of transient failures (HTTP 5xx / 408 / 409 / 425 / 429, timeouts, dropped connections,
    malformed bodies; see :func:`pacore_graph.errors.is_transient`).

    Other 4xx answers are the caller's mistake and are never retried (``compat="reference"`` retries
    every error, as the reference pipeline does).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(5, ge=1, description="attempts per trajectory, the first included")
    initial_delay: float = Field(1.0, ge=0, description="seconds before the first retry")
    max_delay: float = Field(30.0, ge=0, description="cap on one backoff sleep, in seconds")
    backoff: float = Field(2.0, ge=1.0, description="multiplier of the delay after each retry")
    jitter: float = Field(0.5, ge=0, le=1, description="fraction of the delay drawn at random")
    max_retry_after: float = Field(
        300.0,
        ge=0,
        description="longest wait a server's Retry-After (429, 503) gets; asked for more, the "
        "trajectory fails at once with the server's answer",
    )


class PaCoReConfig(BaseModel):
    """Everything that decides what a PaCoRe run sends. Invalid values fail at construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: list[int] = Field(
        default_factory=lambda: list(PRESETS["low"]),
        description="trajectories per round; the final round of 1 is implicit. [] = one plain call",
    )
    temperature: float = Field(1.0, ge=0, description="sampling temperature (paper: 1.0)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling (paper: 1.0)")
    max_tokens: int | None = Field(
        None, ge=1, description="cap on each generated message; None lets the model think to its context"
    )
    max_concurrency: int = Field(256, ge=1, description="run-wide bound on in-flight trajectories")
    seed: int = Field(42, description="seed of the reference shuffle (reference pipeline: 42)")
    reference_order: Literal["length_shuffle", "index"] = Field(
        "length_shuffle", description="sort by length then seeded shuffle (reference), or trajectory order"
    )
    template: str = Field(DEFAULT_TEMPLATE, description="jinja2 synthesis template (paper Table 6)")
    reference_token_cap: int | None = Field(
        None, ge=1, description="cap on the tokens of each reference in the template (None: no cap)"
    )
    context_window: int | None = Field(
        None, ge=256, description="model context in tokens; references are capped to fit before synthesis"
    )
    truncated_policy: Literal["drop", "keep"] = Field(
        "drop",
        description="a trajectory cut off with no conclusion: left out of the references (drop) or its "
        "raw text passed on, as the reference pipeline does (keep)",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    request_timeout: float | None = Field(
        7200.0, gt=0, description="seconds one generation may take (None: no limit); hour-long is normal"
    )
    stream: bool = Field(False, description="every request streams from the server (SSE), not only the final one")
    spaced_gc: bool = Field(
        False,
        description="opt-in: while runs are in flight, make CPython's full GC passes ~10x rarer (each one "
        "stalls the event loop for 100+ ms at 1024 trajectories in flight); the thresholds are process-wide, "
        "so the CLI and benchmarks turn it on, a library user decides; see pacore_graph.graph.gc_policy",
    )
    model_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra request fields, e.g. chat_template_kwargs"
    )
    answer_records: Literal["counts", "full"] = Field(
        "counts",
        description="what the answer message's response_metadata['pacore'] holds of each round: its counts and "
        "usage (a chat thread then grows like a plain chat's), or every trajectory's record with its conclusion",
    )
    compat: Literal["reference"] | None = Field(
        None,
        description="'reference': behave as the reference pipeline (stepfun-ai/PaCoRe base_exp.py) where replies are "
        "odd: every non-empty reply is a reference, a round with none carries on, the answer is the final call's "
        "raw content, every error is retried (see pacore_graph.graph.compat and the README's differences section)",
    )
    # Coordination beyond the paper (pacore_graph.coordination): every option is off by default.
    answer_extractor: str | None = Field(
        None,
        description="reads a conclusion's answer for early stop, vote, dedup and unanimity: 'boxed' (MathArena's "
        "non-strict \\boxed{} reading), 'last_boxed', 'module:function', or such a function itself",
    )
    budget: Budget = Field(default_factory=Budget, description="token budget and wall-clock deadline per run")
    early_stop: EarlyStop = Field(default_factory=EarlyStop, description="cut a round once its answers agree")
    reference_subset: int | None = Field(
        None, ge=1, description="each trajectory of rounds >= 2 sees a seeded random subset of this many references"
    )
    distinct_subsets: bool = Field(False, description="no two trajectories of a round get the same subset")
    dedup_references: bool = Field(
        False, description="show references with the same answer and text once, with how many gave it"
    )
    final_selector: Literal["synthesis", "vote", "verifier"] = Field(
        "synthesis",
        description="how the answer is chosen after the last round: one synthesis (paper), a majority vote over "
        "extracted answers (no final call), or one verifier call naming the best candidate",
    )
    verifier_template: str = Field(VERIFIER_TEMPLATE, description="jinja2 prompt of the verifier call")

    @field_validator("answer_extractor", mode="before")
    @classmethod
    def _named_extractor(cls, extractor: Any) -> str | None:
        """A callable becomes its importable name, so checkpoints and thread ids can hold the config."""
        if extractor is None:
            return None
        if not isinstance(extractor, str) and not callable(extractor):
            raise ValueError(f"answer_extractor must be a name or a function, not {type(extractor).__name__}")
        return extractor_name(extractor)

    @field_validator("rounds")
    @classmethod
    def _positive_rounds(cls, rounds: list[int]) -> list[int]:
        for position, k in enumerate(rounds):
            if k < 1:
                raise ValueError(f"rounds[{position}] is {k}: every round needs at least 1 trajectory")
        return rounds

    @field_validator("template", "verifier_template")
    @classmethod
    def _valid_template(cls, template: str) -> str:
        try:
            jinja2.Template(template)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"template is not valid jinja2: {exc}") from exc
        if "ref_responses" not in template:
            raise ValueError("template never uses ref_responses: the references would be lost")
        return template

    @model_validator(mode="after")
    def _cap_fits_window(self) -> PaCoReConfig:
        if self.context_window and self.max_tokens and self.max_tokens >= self.context_window:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must be smaller than context_window ({self.context_window})"
            )
        return self

    @model_validator(mode="after")
    def _coordination_is_complete(self) -> PaCoReConfig:
        compares = {"early_stop": self.early_stop.active, "final_selector='vote'": self.final_selector == "vote"}
        for option, used in compares.items():
            if used and self.answer_extractor is None:
                raise ValueError(f"{option} compares answers: set answer_extractor ('boxed' or 'module:function')")
        if self.final_selector != "synthesis" and not self.rounds:
            raise ValueError(
                f"final_selector={self.final_selector!r} chooses among a round's conclusions, and rounds is empty"
            )
        if self.distinct_subsets and self.reference_subset is None:
            raise ValueError("distinct_subsets needs reference_subset (the subset size k)")
        return self

    @model_validator(mode="after")
    def _compat_is_reproducible(self) -> PaCoReConfig:
        """Options the reference pipeline does not have would change what compat='reference' sends."""
        if self.compat != "reference":
            return self
        set_options = [
            name
            for name, on in {
                "reference_order='index'": self.reference_order != "length_shuffle",
                "reference_token_cap": self.reference_token_cap is not None,
                "context_window": self.context_window is not None,
                "answer_extractor": self.answer_extractor is not None,
                "budget": self.budget.active,
                "early_stop": self.early_stop.active,
                "reference_subset": self.reference_subset is not None,
                "dedup_references": self.dedup_references,
                f"final_selector={self.final_selector!r}": self.final_selector != "synthesis",
            }.items()
            if on
        ]
        if set_options:
            raise ValueError(
                f"compat='reference' reproduces the reference pipeline, which has no {', '.join(set_options)}: "
                "leave them unset or drop compat"
            )
        return self

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> PaCoReConfig:
        """low [4], medium [16], high [32, 4] (paper)."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
        return cls(rounds=list(PRESETS[name]), **overrides)

    @property
    def schedule(self) -> list[int]:
        """All rounds including the implicit final round of 1."""
        return [*self.rounds, 1]


def parse_rounds(text: str) -> list[int]:
    """'32,4' -> [32, 4]; '0' or '' -> [] (a single plain call); within :func:`check_schedule_size`."""
    text = text.strip()
    if text in ("", "0"):
        return []
    try:
        rounds = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--rounds takes comma-separated integers such as 32,4, not {text[:40]!r}") from None
    return check_schedule_size(rounds, "--rounds")


def check_schedule_size(rounds: list[int], where: str) -> list[int]:
    """Refuse, naming ``where``, a round of no trajectory or a schedule beyond ``MAX_ROUNDS`` rounds of
    ``MAX_TRAJECTORIES_PER_ROUND`` trajectories (a library caller who means more builds the config directly)."""
    if len(rounds) > MAX_ROUNDS:
        raise ValueError(f"{where}: {len(rounds)} rounds requested; at most {MAX_ROUNDS}")
    for position, k in enumerate(rounds):
        if not 1 <= k <= MAX_TRAJECTORIES_PER_ROUND:
            raise ValueError(
                f"{where}: round {position + 1} asks for {k} trajectories; each round takes 1 to "
                f"{MAX_TRAJECTORIES_PER_ROUND}"
            )
    return rounds
