"""Which of the previous round's conclusions each trajectory of the next round sees.

The paper: every trajectory sees all of them (template order: :func:`~pacore_graph.synthesis.prompt.order_references`).
Two options change that, both recorded on the trajectories that saw the lists:

- ``reference_subset=k`` (Recursive Self-Aggregation): trajectory i sees a random subset of k, drawn with
  ``random.Random(f"{seed}:{round}:{i}")`` (the subset in drawn order), or all of them when there are at
  most k. ``distinct_subsets`` draws the round's subsets one after another from ``Random(f"{seed}:{round}")``
  and redraws a subset already given, while unused ones remain (as ``llm-rsa`` does).
- ``dedup_references``: references whose extracted answer and text are the same (spaces aside) are shown
  once, with a note saying how many gave it (:data:`DUPLICATES_NOTE`), so synthesis prompts shrink.
  Within a subset, the count is within the subset.
"""

from __future__ import annotations

import random
from math import comb
from typing import TYPE_CHECKING, NamedTuple

from pacore_graph.coordination.answers import answer_key
from pacore_graph.records import RoundData, RoundRecord, TrajectoryRecord

if TYPE_CHECKING:
    from pacore_graph.config import PaCoReConfig

DUPLICATES_NOTE = "\n\n[{count} references gave this same response.]"


class References(NamedTuple):
    """What one trajectory of the next round sees: texts in template order, and (when an option chose them)
    the previous round's trajectory index behind each text and how many references each stands for."""

    texts: list[str]
    indices: list[int] | None = None
    counts: list[int] | None = None


def next_round_references(
    previous: RoundData | None, k: int, round_index: int, config: PaCoReConfig
) -> list[References]:
    """One :class:`References` per trajectory of round ``round_index`` (``previous`` is None for round 1)."""
    if previous is None:
        return [References([])] * k
    round_record = RoundRecord.model_validate(previous)
    subset, dedup = config.reference_subset, config.dedup_references
    if subset is None and not dedup:
        return [References(round_record.references)] * k
    by_index = {record.index: record for record in round_record.trajectories}
    pool = [by_index[index] for index in round_record.reference_order]
    if subset is None:
        return [_collapse(pool, dedup)] * k
    draws = _subsets(len(pool), subset, k, round_index, config.seed, config.distinct_subsets)
    return [_collapse([pool[position] for position in draw], dedup) for draw in draws]


def _subsets(size: int, subset: int, k: int, round_index: int, seed: int, distinct: bool) -> list[list[int]]:
    """Positions into the pool for each of the k trajectories."""
    if size <= subset:
        return [list(range(size))] * k
    if not distinct:
        return [random.Random(f"{seed}:{round_index}:{index}").sample(range(size), subset) for index in range(k)]
    rng = random.Random(f"{seed}:{round_index}")
    available = comb(size, subset)
    given: set[frozenset[int]] = set()
    draws = []
    for _ in range(k):
        draw = rng.sample(range(size), subset)
        while frozenset(draw) in given and len(given) < available:
            draw = rng.sample(range(size), subset)
        given.add(frozenset(draw))
        draws.append(draw)
    return draws


def _collapse(records: list[TrajectoryRecord], dedup: bool) -> References:
    """The records' texts, with identical ones shown once (first place kept) when ``dedup``."""
    texts: list[str] = []
    indices: list[int] = []
    counts: list[int] = []
    seen: dict[tuple[str | None, str], int] = {}
    for record in records:
        text = record.reference
        key = (answer_key(record.answer), " ".join(text.split()))
        if dedup and key in seen:
            counts[seen[key]] += 1
            continue
        seen[key] = len(texts)
        texts.append(text)
        indices.append(record.index)
        counts.append(1)
    if dedup:
        noted = zip(texts, counts, strict=True)
        texts = [text + DUPLICATES_NOTE.format(count=count) if count > 1 else text for text, count in noted]
    return References(texts, indices, counts if dedup else None)
