"""Integers 1..3999 as Roman numerals."""

_TABLE = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(number):
    if not isinstance(number, int) or not 0 < number < 4000:
        raise ValueError(f"cannot write {number!r} in Roman numerals")
    out = []
    for value, letters in _TABLE:
        count, number = divmod(number, value)
        out.append(letters * count)
    return "".join(out)
