from semver.core import Version, compare, parse

__all__ = ["Version", "compare", "parse"]
