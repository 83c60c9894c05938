"""Test support shipped with tunecache: the store contract suite and the store stress writer."""
