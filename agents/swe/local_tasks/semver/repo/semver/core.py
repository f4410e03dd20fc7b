"""Parse and compare semantic versions (MAJOR.MINOR.PATCH)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Version:
    major: str
    minor: str
    patch: str

    def key(self):
        return (self.major, self.minor, self.patch)

    def __str__(self):
        return f"{self.major}.{self.minor}.{self.patch}"


def parse(text):
    parts = text.strip().lstrip("v").split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a semantic version: {text!r}")
    return Version(*parts)


def compare(a, b):
    """Return -1, 0 or 1 as version ``a`` is lower than, equal to or higher than ``b``."""
    left, right = parse(a).key(), parse(b).key()
    return (left > right) - (left < right)
