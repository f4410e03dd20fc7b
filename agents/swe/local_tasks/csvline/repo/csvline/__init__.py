from csvline.split import split_fields

__all__ = ["split_fields"]
