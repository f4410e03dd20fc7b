import pytest
from semver import compare, parse


def test_parse_valid():
    assert str(parse("v1.2.3")) == "1.2.3"


def test_parse_invalid():
    with pytest.raises(ValueError):
        parse("1.2")


def test_equal_versions():
    assert compare("1.2.3", "1.2.3") == 0


def test_major_difference():
    assert compare("2.0.0", "1.0.0") == 1
    assert compare("1.0.0", "2.0.0") == -1
