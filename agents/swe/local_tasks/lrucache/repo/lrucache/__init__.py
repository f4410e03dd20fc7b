from lrucache.cache import LRUCache

__all__ = ["LRUCache"]
