"""A panel: several models in one PaCoRe run, named by keys (``PaCoReConfig.panel``).

Each round's K slots are drawn from the panel's models, by weights or by an explicit slot map per round, and one
model (the synthesiser) writes the final round. The panel names models only: the model objects come where a model
comes today, as a mapping from these names (``solve({"small": m1, "strong": m2}, ...)``), so a config holding a
panel stays plain data that checkpoints and thread ids can keep.

Which model a slot gets is decided here, from the panel, the round and the seed alone (:meth:`Panel.slot_map`):
a resumed run, a checkpoint and a results row all see the same slot map.

A leaf like :mod:`pacore_graph.config`: it imports nothing of the library.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_NAME = 64


class PanelMember(BaseModel):
    """One model of a panel: its share of each round's slots, and what is its own rather than the run's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(1.0, ge=0, description="share of each round's slots (0: only where a slot map names it)")
    context_window: int | None = Field(
        None, ge=256, description="its context in tokens (default: the run's, else what its server reports)"
    )
    max_tokens: int | None = Field(None, ge=1, description="cap on each of its replies (default: the run's)")
    max_concurrency: int | None = Field(
        None, ge=1, description="its own bound on trajectories in flight (a hosted API's rate limit), inside the run's"
    )
    max_attempts: int | None = Field(None, ge=1, description="attempts per trajectory (default: the run's retry)")


RoundSlots = list[str] | dict[str, float]
"""One round's slots: an explicit slot map (one model name per trajectory, K of them) or weights by name."""


class Panel(BaseModel):
    """The models of one run, by name, and how each round's slots are assigned to them.

    ``models`` maps a name to a :class:`PanelMember` (a bare number is its weight). ``rounds[i]``, when given,
    overrides round ``i``'s assignment (a slot map or weights); the others use the members' weights. The final
    round is written by ``synthesizer`` (needed when the panel has several models). Weights are apportioned
    exactly (largest remainder: weights 3 and 1 over K=8 give 6 and 2 slots), then the slots are shuffled with a
    seeded RNG (``seed``, default the run's ``PaCoReConfig.seed``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[str, PanelMember] = Field(description="name -> member (a number: its weight)")
    rounds: list[RoundSlots | None] = Field(
        default_factory=list, description="per round: a slot map (K names) or weights; None or absent: the members'"
    )
    synthesizer: str | None = Field(None, description="the model that writes the final round")
    seed: int | None = Field(None, description="seed of the slot shuffle (default: PaCoReConfig.seed)")

    @field_validator("models", mode="before")
    @classmethod
    def _members(cls, models: Any) -> Any:
        if isinstance(models, Mapping):
            return {name: {"weight": m} if isinstance(m, int | float) else m for name, m in models.items()}
        if isinstance(models, Sequence) and not isinstance(models, str):  # a list of names: equal weights
            return {name: {} for name in models}
        return models

    @model_validator(mode="after")
    def _consistent(self) -> Panel:
        if not self.models:
            raise ValueError("a panel needs at least one model")
        for name in self.models:
            if not name.strip() or len(name) > MAX_NAME:
                raise ValueError(f"panel model name {name[:80]!r} must be 1 to {MAX_NAME} characters")
        if len(self.models) > 1 and self.synthesizer is None:
            raise ValueError(
                f"a panel of {len(self.models)} models needs a synthesizer: the model that writes the final round "
                f"(one of {', '.join(self.models)})"
            )
        self._known([self.synthesizer] if self.synthesizer else [], "synthesizer")
        for position, slots in enumerate(self.rounds):
            where = f"panel rounds[{position}]"
            if isinstance(slots, dict):
                self._known(slots, where)
                if any(w < 0 for w in slots.values()) or sum(slots.values()) <= 0:
                    raise ValueError(f"{where}: weights must be >= 0 with a positive total")
            elif slots is not None:
                self._known(slots, where)
        if self._default_weights_needed() and sum(m.weight for m in self.models.values()) <= 0:
            raise ValueError("every panel model has weight 0: give one a weight, or a slot map for every round")
        return self

    def _default_weights_needed(self) -> bool:
        return not self.rounds or any(slots is None for slots in self.rounds)

    def _known(self, names: Iterable[str], where: str) -> None:
        unknown = [name for name in names if name not in self.models]
        if unknown:
            raise ValueError(
                f"{where} names {', '.join(map(repr, unknown))}, not in the panel ({', '.join(self.models)})"
            )

    @property
    def final_model(self) -> str:
        """The model that writes the final round."""
        return self.synthesizer or next(iter(self.models))

    def check_schedule(self, rounds: Sequence[int]) -> None:
        """The panel fits the schedule ``rounds`` (without the final round): a slot map per round of K names."""
        if len(self.rounds) > len(rounds):
            raise ValueError(f"the panel assigns {len(self.rounds)} rounds, and the schedule has {len(rounds)}")
        for position, (slots, k) in enumerate(zip(self.rounds, rounds, strict=False)):
            if isinstance(slots, list) and len(slots) != k:
                raise ValueError(f"panel rounds[{position}] maps {len(slots)} slots, and round {position + 1} has {k}")
        if len(self.rounds) < len(rounds) and sum(m.weight for m in self.models.values()) <= 0:
            raise ValueError("every panel model has weight 0 and a round has no slot map")

    def slot_map(self, round_index: int, k: int, final: bool, seed: int) -> list[str]:
        """The model name of each of round ``round_index``'s ``k`` slots; the final round's is the synthesiser."""
        if final:
            return [self.final_model] * k
        slots = self.rounds[round_index] if round_index < len(self.rounds) else None
        if isinstance(slots, list):
            return list(slots)
        weights = slots if isinstance(slots, dict) else {name: m.weight for name, m in self.models.items()}
        names = apportion(weights, k)
        random.Random(f"pacore-panel:{self.seed if self.seed is not None else seed}:{round_index}").shuffle(names)
        return names


def apportion(weights: Mapping[str, float], k: int) -> list[str]:
    """``k`` slots shared by weight, by largest remainder (ties to the name listed first): names in listing order."""
    total = sum(weights.values())
    quotas = {name: k * weight / total for name, weight in weights.items()}
    counts = {name: int(quota) for name, quota in quotas.items()}
    left = k - sum(counts.values())
    by_remainder = sorted(weights, key=lambda name: -(quotas[name] - counts[name]))
    for name in by_remainder[:left]:
        counts[name] += 1
    return [name for name in weights for _ in range(counts[name])]
