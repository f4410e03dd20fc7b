import pytest
from calendarx import days_in_month, days_in_year


def test_month_lengths():
    assert [days_in_month(m, 2023) for m in (1, 4, 2)] == [31, 30, 28]


def test_ordinary_leap_year():
    assert days_in_month(2, 2024) == 29
    assert days_in_year(2024) == 366


def test_bad_month():
    with pytest.raises(ValueError):
        days_in_month(13, 2024)
