"""Closed intervals [start, end] given as pairs."""


def merge(intervals):
    """Merge overlapping closed intervals; the result is sorted and disjoint."""
    result = []
    for start, end in sorted(intervals):
        if start > end:
            raise ValueError(f"empty interval [{start}, {end}]")
        if result and start < result[-1][1]:
            result[-1][1] = max(result[-1][1], end)
        else:
            result.append([start, end])
    return [tuple(pair) for pair in result]


def total_length(intervals):
    return sum(end - start for start, end in merge(intervals))
