"""Durations such as "45s", "2m", "1h30m" or "1d2h" as a number of seconds."""

import re

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([dhms])")


def parse_duration(text):
    text = text.strip().lower()
    if not re.fullmatch(r"(\d+[dhms])+", text):
        raise ValueError(f"not a duration: {text!r}")
    match = _PART.match(text)
    return int(match.group(1)) * UNITS[match.group(2)]
