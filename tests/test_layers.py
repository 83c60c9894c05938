"""The layering the project promises: what imports without TVM or a store backend."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Modules that must import without TVM (the values, the store's contract and keys, the pure
#: planning code, the CLI's parser) -- checked in a fresh interpreter.
TVM_FREE = [
    "tunecache",
    "tunecache.values",
    "tunecache.store",
    "tunecache.store.keys",
    "tunecache.store.records",
    "tunecache.reuse",
    "tunecache.reuse.graph",
    "tunecache.reuse.planner",
    "tunecache.reuse.planning",
    "tunecache.reuse.costs",
    "tunecache.reuse.conditions",
    "tunecache.reuse.bridge",
    "tunecache.reuse.loopnest",
    "tunecache.reuse.synthetic",
    "tunecache.report",
    "tunecache.cli",
    "tunecache.dynamic",
    "tunecache.dynamo",
    "tunecache.queueing",
    "tunecache.worker",
]


@pytest.mark.parametrize("module", TVM_FREE)
def test_module_imports_without_tvm(module: str) -> None:
    code = f"import sys, {module}; bad = sorted(m for m in ('tvm', 'tvm_ffi', 'torch') if m in sys.modules); print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {module} imported {out.stdout.strip()}"


def test_the_public_api_resolves() -> None:
    import tunecache

    assert set(dir(tunecache)) >= {"compile", "warm", "open_store", "Store", "zoo", "TunecacheError"}
    for name in tunecache.__all__:
        assert getattr(tunecache, name) is not None
    assert callable(tunecache.warm) and callable(tunecache.compile)
