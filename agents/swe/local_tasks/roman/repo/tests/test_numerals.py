import pytest
from roman import to_roman


@pytest.mark.parametrize("number,text", [(1, "I"), (3, "III"), (8, "VIII"), (2023, "MMXXIII")])
def test_additive_numbers(number, text):
    assert to_roman(number) == text


@pytest.mark.parametrize("bad", [0, 4000, -1, 2.5])
def test_out_of_range(bad):
    with pytest.raises(ValueError):
        to_roman(bad)
