"""What a math benchmark run computes, and the fingerprint its output folder keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from pacore_benchmarks.math.grading import grading_rules
from pacore_benchmarks.perf.coordination import VARIANTS, method_options
from pacore_graph import PaCoReConfig
from pacore_graph.extend import PRESETS

Method = Literal["single", "vote", "pacore"]
METHODS: tuple[Method, ...] = ("single", "vote", "pacore")


class PoolSettings(BaseModel):
    """What every run on a pool of first-round trajectories shares: the data, the folder, the pool, and how
    the model is sampled (the benchmark, the training-data export)."""

    data: str
    output: Path
    limit: int | None = Field(None, ge=1)
    pool: int | None = Field(None, ge=1, description="pooled first-round trajectories per problem")
    pool_file: Path | None = Field(None, description="default: OUTPUT/pool.jsonl")
    seed: int = 0
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_concurrency: int = Field(256, ge=1, description="model calls in flight across the whole run")
    pacore_overrides: dict[str, Any] = Field(default_factory=dict, description="extra PaCoReConfig fields")

    @property
    def pool_path(self) -> Path:
        return self.pool_file or self.output / "pool.jsonl"

    def pacore_config(self, rounds: list[int], sample: int, **options: Any) -> PaCoReConfig:
        return PaCoReConfig(
            rounds=rounds,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=shuffle_seed(self.seed, sample),
            **self.pacore_overrides,
            **options,
        )

    def sampling_fingerprint(self, model: str) -> dict[str, Any]:
        """What the pool and every model call depend on, with the grading rules their verdicts follow."""
        return {
            "model": model,
            "seed": self.seed,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "pacore_overrides": self.pacore_overrides,
            "grading": grading_rules(),
        }


class MathRunSettings(PoolSettings):
    """Everything that decides what a math benchmark run computes."""

    methods: list[Method] = Field(default_factory=lambda: list(METHODS))
    schedules: list[list[int]] = Field(default_factory=lambda: [PRESETS["low"], PRESETS["medium"], PRESETS["high"]])
    vote_ks: list[int] | None = Field(None, description="vote sizes; default: the first round of each schedule")
    samples: int = Field(1, ge=1, description="samples per problem for vote and PaCoRe (pass@1 is their mean)")
    coordination: list[str] = Field(
        default_factory=list, description=f"PaCoRe variants to run beside it: {', '.join(VARIANTS)}"
    )
    budget_tokens: int | None = Field(None, ge=1, description="token budget per problem of the budget variant")

    @field_validator("coordination")
    @classmethod
    def _known_variants(cls, variants: list[str]) -> list[str]:
        unknown = [variant for variant in variants if variant not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown coordination variant {unknown[0]!r}: choose from {', '.join(VARIANTS)}")
        return list(dict.fromkeys(variants))

    @field_validator("methods")
    @classmethod
    def _unique_methods(cls, methods: list[Method]) -> list[Method]:
        return list(dict.fromkeys(methods))

    @field_validator("schedules")
    @classmethod
    def _valid_schedules(cls, schedules: list[list[int]]) -> list[list[int]]:
        for rounds in schedules:
            if not rounds:
                raise ValueError("an empty schedule is a single plain call: use --methods single for that")
            PaCoReConfig(rounds=rounds)  # the operator's own validation and message
        unique: list[list[int]] = []
        for rounds in schedules:
            if rounds not in unique:
                unique.append(list(rounds))
        return unique

    @model_validator(mode="after")
    def _something_to_run(self) -> MathRunSettings:
        if not self.methods and not self.coordination:
            raise ValueError("--methods needs at least one of single, vote, pacore, pacore+OPTION")
        if "budget" in self.coordination and self.budget_tokens is None:
            raise ValueError("pacore+budget needs --budget-tokens (completion tokens per problem)")
        return self

    @model_validator(mode="after")
    def _pool_is_big_enough(self) -> MathRunSettings:
        needed = self.pool_needed
        if self.pool is not None and self.pool < needed:
            raise ValueError(
                f"--pool {self.pool} is too small: the largest first round / vote here draws {needed} "
                f"distinct trajectories per problem (pass --pool {needed} or more)"
            )
        return self

    @property
    def effective_vote_ks(self) -> list[int]:
        if "vote" not in self.methods:
            return []
        ks = self.vote_ks if self.vote_ks is not None else [rounds[0] for rounds in self.schedules]
        return sorted({k for k in ks if k >= 2})

    @property
    def pacore_schedules(self) -> list[list[int]]:
        return self.schedules if "pacore" in self.methods or self.coordination else []

    @property
    def pacore_units(self) -> list[tuple[list[int], str]]:
        """(schedule, variant) of every PaCoRe setting; variant "" is the paper's."""
        variants = ([""] if "pacore" in self.methods else []) + self.coordination
        return [(rounds, variant) for rounds in self.schedules for variant in variants]

    @property
    def pool_needed(self) -> int:
        draws = [rounds[0] for rounds in self.pacore_schedules] + self.effective_vote_ks
        if "single" in self.methods:
            draws.append(self.samples)
        return max(draws + [1])

    @property
    def pool_size(self) -> int:
        return self.pool or self.pool_needed

    def pacore_config(self, rounds: list[int], sample: int, variant: str = "", **options: Any) -> PaCoReConfig:
        coordination = method_options(variant, budget_tokens=self.budget_tokens) if variant else {}
        return super().pacore_config(rounds, sample, **{**coordination, **options})

    def fingerprint(self, model: str) -> dict[str, Any]:
        """What results in one folder must share: rows made under other values would not be comparable."""
        return {**self.sampling_fingerprint(model), "pool_size": self.pool_size, "budget_tokens": self.budget_tokens}


REFERENCE_SEED: int = PaCoReConfig.model_fields["seed"].default  # 42, the reference pipeline's Exp.random_seed


def shuffle_seed(seed: int, sample: int) -> int:
    """The reference shuffle's seed of one sample: the reference pipeline's 42 for the first sample of the
    default ``--seed 0``, then one apart per sample (so samples differ) and far apart per ``--seed``."""
    return REFERENCE_SEED + seed * 1_000_003 + sample


MESSAGE_SET_SIZES = (16, 24)  # the paper's |M| ~ U(16, 24), drawn from a pool of 24 per problem


def _open_interval(low: float | None, high: float | None, name: str) -> None:
    if low is not None and high is not None and low >= high:
        raise ValueError(f"--min-{name} {low} must be below --max-{name} {high}: the filter keeps min < accuracy < max")


class ExportSettings(PoolSettings):
    """What ``pacore bench math export-train`` computes: a pool per problem (``pool`` None: the pool file as
    it is), its message accuracy, a synthesis run over ``synthesis_samples`` draws of a message set, and the
    paper's two filters (each bound None: no bound; a problem is kept when strictly between)."""

    min_message_accuracy: float | None = Field(None, ge=0, le=1)
    max_message_accuracy: float | None = Field(None, ge=0, le=1)
    synthesis_samples: int = Field(0, ge=0, description="synthesis runs per problem kept by stage 1 (0: no stage 2)")
    min_synthesis_accuracy: float | None = Field(None, ge=0, le=1)
    max_synthesis_accuracy: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _intervals(self) -> ExportSettings:
        _open_interval(self.min_message_accuracy, self.max_message_accuracy, "message-accuracy")
        _open_interval(self.min_synthesis_accuracy, self.max_synthesis_accuracy, "synthesis-accuracy")
        synthesis_bounds = (self.min_synthesis_accuracy, self.max_synthesis_accuracy)
        if self.synthesis_samples == 0 and any(bound is not None for bound in synthesis_bounds):
            raise ValueError("--min/--max-synthesis-accuracy filter on a synthesis run: pass --synthesis-samples N")
        return self

    def fingerprint(self, model: str) -> dict[str, Any]:
        """The filters and the sample count are left out: changing them re-filters what is already made."""
        return {**self.sampling_fingerprint(model), "message_set_sizes": list(MESSAGE_SET_SIZES)}


def kept(accuracy: float, low: float | None, high: float | None) -> bool:
    """The paper's filter: strictly between its bounds (a missing bound does not bound)."""
    return (low is None or accuracy > low) and (high is None or accuracy < high)
