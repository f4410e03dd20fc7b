"""Which schedule continues which: a run (or a run folder) escalates to a schedule with as many rounds or more,
each at least as wide, and reuses what it has (:mod:`pacore_graph.graph.reuse`); a smaller one is refused."""

from __future__ import annotations

from collections.abc import Sequence


def escalates(earlier: Sequence[int], later: Sequence[int]) -> bool:
    """Whether schedule ``later`` continues ``earlier``: as many rounds or more, each at least as wide."""
    return len(later) >= len(earlier) and all(new >= old for old, new in zip(earlier, later, strict=False))


def check_escalation(earlier: Sequence[int], later: Sequence[int], what: str) -> None:
    """Refuse in one line (``ValueError``, naming ``what`` ran ``earlier``) a ``later`` that does not continue it."""
    if not escalates(earlier, later):
        raise ValueError(
            f"{what} ran rounds {list(earlier)}; rounds {list(later)} is smaller: a run continues only at a "
            "schedule as long or longer with every round at least as wide"
        )
