from roman.numerals import to_roman

__all__ = ["to_roman"]
