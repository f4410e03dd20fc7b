import pytest
from durations import parse_duration


@pytest.mark.parametrize("text,seconds", [("45s", 45), ("2m", 120), ("3h", 10800), ("1d", 86400)])
def test_single_unit(text, seconds):
    assert parse_duration(text) == seconds


def test_invalid():
    with pytest.raises(ValueError):
        parse_duration("1x")
