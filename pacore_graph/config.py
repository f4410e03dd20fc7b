"""Configuration of one PaCoRe run: the schedule, sampling, references, retries, limits and the coordination
options (all off by default), with their defaults: the paper's synthesis template among them.

A leaf: it imports nothing of the package but :mod:`pacore_graph.panel` (a leaf too), so every folder may read a
config (see docs/architecture.md). Names of answer extractors are checked here by import (:func:`extractor_name`);
the extractors themselves are in :mod:`pacore_graph.coordination.answers`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pacore_graph.panel import Panel

PRESETS: dict[str, list[int]] = {"low": [4], "medium": [16], "high": [32, 4]}
# The largest schedule the commands (--rounds) and the endpoint run: far beyond the paper's (at most 32 per round,
# 2 rounds), small enough that a typo (--rounds 1000000) is refused instead of building a million-branch run.
MAX_ROUNDS = 8
MAX_TRAJECTORIES_PER_ROUND = 1024

# The synthesis template (paper Table 6). PaCoRe-8B was trained on exactly this text, rendered by jinja2 with
# default settings (which drop the template's trailing newline): the default must stay byte-identical.
DEFAULT_TEMPLATE = """\
You are given a problem and a list of reference responses. Your job is to analyze these references and provide your own response.

Original Problem:
{{ original_prompt }}

Reference Responses:
{% for response in ref_responses %}
Reference {{ loop.index }}:
{{ response }}
{% endfor %}

Now, based on the original problem and reference responses above, please provide your own comprehensive solution.
"""  # noqa: E501 - the paper's text, long lines included

# The verifier's prompt (final_selector="verifier"), rendered like the synthesis template.
VERIFIER_TEMPLATE = r"""You are given a problem and a list of candidate responses. Check each candidate's reasoning and final answer, and decide which candidate is correct.

Original Problem:
{{ original_prompt }}

Candidate Responses:
{% for response in ref_responses %}
Candidate {{ loop.index }}:
{{ response }}
{% endfor %}

Reply with the number of the best candidate inside \boxed{}, for example \boxed{1}.
"""  # noqa: E501 - a prompt is kept as sent: one line of text per line

# The built-in answer extractors: the name a config keeps for each, and where it is.
BUILTIN_EXTRACTORS = {
    "boxed": "pacore_graph.coordination.answers:boxed_answer",
    "last_boxed": "pacore_graph.coordination.answers:last_boxed",
}


class Budget(BaseModel):
    """Limits of one run (one problem). When one runs out, the trajectories in flight are cancelled (their
    HTTP requests closed, so the server stops generating), the round is collected with what finished and no
    further round starts: the answer is chosen from what there is (:mod:`pacore_graph.coordination.ending`).

    A run spends at most ``tokens`` plus what the trajectories in flight when it ran out had generated.
    Tokens count as trajectories finish (servers report usage at the end of a request).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: int | None = Field(None, ge=1, description="completion tokens over every round (reasoning included)")
    seconds: float | None = Field(
        None, gt=0, description="wall-clock deadline from the start of the run; a resumed run starts its clock again"
    )

    @property
    def active(self) -> bool:
        return self.tokens is not None or self.seconds is not None


class EarlyStop(BaseModel):
    """Stop a round once its answers agree (needs ``answer_extractor``): the rest of the round is cancelled.

    Answers count as the same when their :func:`~pacore_graph.coordination.answers.answer_key` is equal.
    The rules look at the trajectories of the round that finished with a conclusion, in finishing order.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agree: int | None = Field(None, ge=2, description="stop once this many finished trajectories give one answer")
    lead: int | None = Field(
        None,
        ge=1,
        description="stop once the leading answer is ahead of the runner-up by this many (a sequential "
        "test: it waits longer when the round is split)",
    )
    unbeatable: bool = Field(
        False,
        description="stop once the leading answer cannot be caught: its count exceeds the runner-up's plus the "
        "trajectories still running (the round's vote can no longer change)",
    )
    skip_unanimous: bool = Field(
        False,
        description="after a round whose conclusions all give one answer, run no further round: the first "
        "such conclusion (template order) is the answer",
    )

    @property
    def active(self) -> bool:
        return self.cancels or self.skip_unanimous

    @property
    def cancels(self) -> bool:
        """Whether a rule may cut a round short (``skip_unanimous`` acts between rounds only)."""
        return self.agree is not None or self.lead is not None or self.unbeatable


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
    panel: Panel | None = Field(
        None, description="several models in one run: which model each slot of each round gets (pacore_graph.panel)"
    )

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
    def _panel_fits_schedule(self) -> PaCoReConfig:
        if self.panel is not None:
            self.panel.check_schedule(self.rounds)
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
                "panel": self.panel is not None,
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


def importable(name: str) -> Callable[..., Any]:
    """The callable ``"module:function"`` names (``function`` may be ``Class.attribute``); ValueError otherwise."""
    module_name, colon, attribute = name.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(
            f"unknown answer_extractor {name!r}: use {', '.join(map(repr, BUILTIN_EXTRACTORS))} or 'module:function'"
        )
    try:
        found: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"answer_extractor {name!r} cannot be imported: {exc}") from None
    if not callable(found):
        raise ValueError(f"answer_extractor {name!r} is not callable")
    return found


def extractor_name(extractor: str | Callable[..., object]) -> str:
    """The name a config keeps for an extractor, so that checkpoints and thread ids can hold it.

    A callable must be reachable by import (a module-level function or a class attribute); a lambda or a
    local function has no such name and is refused with a message that says what to do.
    """
    if isinstance(extractor, str):
        if extractor not in BUILTIN_EXTRACTORS:
            importable(extractor)
        return extractor
    module, qualname = getattr(extractor, "__module__", None), getattr(extractor, "__qualname__", "")
    if module and qualname and "<" not in qualname:
        name = f"{module}:{qualname}"
        try:
            if importable(name) is extractor:
                builtin = [short for short, path in BUILTIN_EXTRACTORS.items() if path == name]
                return builtin[0] if builtin else name
        except ValueError:
            pass
    raise ValueError(
        f"answer_extractor {extractor!r} has no importable name, and a checkpoint or thread id must record it: "
        "define it at module level and pass it (or its 'module:function' name), or use 'boxed'"
    )
