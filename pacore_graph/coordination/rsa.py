"""Recursive Self-Aggregation (Venkatraman et al. 2025, HyperPotatoNeo/RSA) as a PaCoRe configuration.

RSA keeps a population of N candidates. Loop 1 samples N independently; each later loop replaces the
population by N aggregations, each over k candidates drawn at random from the previous population; after
T loops (T counts the first) the answer is the majority vote of the last population.

On the operator: ``rounds=[N] * T`` (round 1 samples N, every later round is N trajectories each seeing a
seeded random subset of k of the previous round's conclusions), RSA's aggregation prompt as the template,
and a majority vote over the last round instead of the final synthesis. Candidates are conclusions: with a
non-reasoning model (RSA's Qwen3-*-Instruct runs) that is the whole reply, as in RSA.
"""

from __future__ import annotations

from typing import Any

from pacore_graph.config import PaCoReConfig
from pacore_graph.coordination.templates import RSA_TEMPLATE


def rsa_config(population: int = 16, subset: int = 4, loops: int = 10, **overrides: Any) -> PaCoReConfig:
    """RSA's setting (its eval_loop.py defaults: N=16, k=4, T=10) as a PaCoReConfig; ``overrides`` win."""
    if subset > population:
        raise ValueError(f"subset k={subset} is larger than the population N={population}")
    fields: dict[str, Any] = {
        "rounds": [population] * loops,
        "reference_subset": subset,
        "template": RSA_TEMPLATE,
        "final_selector": "vote",
        "answer_extractor": "boxed",
        "reference_order": "index",
    }
    fields.update(overrides)
    return PaCoReConfig(**fields)
