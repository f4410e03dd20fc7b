import pytest
from csvline import split_fields


def test_plain_fields():
    assert split_fields("a,b,c") == ["a", "b", "c"]


def test_quoted_separator():
    assert split_fields('"a,b",c') == ["a,b", "c"]


def test_empty_fields():
    assert split_fields("a,,c,") == ["a", "", "c", ""]


def test_unterminated_quote():
    with pytest.raises(ValueError):
        split_fields('"abc')
