import pytest
from intervals import merge, total_length


def test_overlapping():
    assert merge([(1, 4), (2, 6)]) == [(1, 6)]


def test_disjoint_sorted():
    assert merge([(5, 7), (1, 2)]) == [(1, 2), (5, 7)]


def test_empty():
    assert merge([]) == []
    assert total_length([]) == 0


def test_invalid_interval():
    with pytest.raises(ValueError):
        merge([(3, 1)])
