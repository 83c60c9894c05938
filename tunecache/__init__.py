"""tunecache: a persistent, shareable store of tuned TVM tensor programs, with shape-aware reuse.

The ladder for every task of a model: look up the store (hit) -> plan reuse -> narrowed search
(reused) -> full search (tuned) -> commit. ``import tunecache`` does not import TVM.
"""

from __future__ import annotations

from typing import Any

from tunecache.errors import TunecacheError

__version__ = "0.1.0"

__all__ = ["TunecacheError", "__version__", "compile", "open_store"]


def __getattr__(name: str) -> Any:
    # Lazy: keep `import tunecache` and `tunecache --help` instant.
    if name == "compile":
        from tunecache.api import compile as fn

        return fn
    if name == "open_store":
        from tunecache.store import open_store

        return open_store
    if name == "warm":
        from tunecache.api import warm

        return warm
    raise AttributeError(f"module 'tunecache' has no attribute {name!r}")
