"""tunecache: a persistent, shareable store of tuned TVM tensor programs, with shape-aware reuse.

The ladder for every task of a model (:mod:`tunecache.pipeline`): look up the store (hit) ->
plan reuse -> narrowed search (reused) -> full search (tuned) -> build -> report.
``import tunecache`` does not import TVM: the public names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from tunecache.errors import TunecacheError

__version__ = "0.1.0"

#: Public name -> the module that defines it (loaded on first access).
_LAZY = {
    "compile": "tunecache.api",
    "CompiledModel": "tunecache.api",
    "warm": "tunecache.warming",
    "WarmReport": "tunecache.report",
    "open_store": "tunecache.store",
    "Store": "tunecache.store",
    "CompileReport": "tunecache.report",
    "TaskReport": "tunecache.report",
    "zoo": "tunecache.zoo",
}

__all__ = ["TunecacheError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    # Lazy: keep `import tunecache` and `tunecache --help` instant.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunecache' has no attribute {name!r}")
    if name == "zoo":
        return importlib.import_module(module)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
