"""The thin layer between tunecache and TVM: every TVM import goes through here.

``import tunecache`` never imports TVM. Code that needs TVM calls :func:`load_tvm` first, which
imports TVM once per process and, for CPU targets, skips the ~30 s import of tensor intrinsics
for GPUs and other CPUs that MetaSchedule would otherwise pay in every process (see
../shared/TVM_NOTES.md, "Stock MetaSchedule fails here"). It also sizes TVM's runtime thread
pool to the physical cores (:func:`tunecache.config.default_tvm_threads`).
"""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

from tunecache.errors import DependencyError

__all__ = ["load_tvm", "stubbed_intrinsics"]

_INTRIN_PKG = "tvm.s_tir.tensor_intrin"
#: Intrinsic modules each target kind really needs; the others are stubbed out.
_NEEDED: dict[str, frozenset[str]] = {
    "llvm": frozenset({"x86"}),
    "cuda": frozenset({"cuda"}),
    "rocm": frozenset({"rocm"}),
}
_ALL_INTRIN = ("cuda", "rocm", "hexagon", "arm_cpu", "riscv_cpu", "metal", "x86")

_lock = threading.Lock()
_stubbed: set[str] = set()
_loaded_kinds: set[str] = set()


def stubbed_intrinsics() -> frozenset[str]:
    """Return the tensor-intrinsic modules this process replaced by empty stubs."""
    return frozenset(_stubbed)


def load_tvm(target_kind: str = "llvm") -> types.ModuleType:
    """Import TVM (once) with only the tensor intrinsics ``target_kind`` needs.

    Parameters
    ----------
    target_kind
        ``"llvm"`` (default), ``"cuda"``, ... Intrinsic modules for other targets are
        replaced by empty modules *if* they have not been imported yet. Asking later for a
        kind whose intrinsics were stubbed re-imports them for real.

    Returns
    -------
    module
        The ``tvm`` package.

    Raises
    ------
    DependencyError
        If TVM is not installed.
    """
    with _lock:
        if not _loaded_kinds:  # before TVM's thread pool can start, in this process or its workers
            from tunecache import config
            from tunecache.tvm_layer.target import physical_cores

            config.default_tvm_threads(physical_cores())
        try:
            import tvm  # noqa: F401
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise DependencyError(
                "apache-tvm is not installed: run `pip install -e .` in the tunecache checkout "
                "(it pins apache-tvm==0.27.0.post1 and apache-tvm-ffi==0.1.14.post1)"
            ) from err
        needed = _NEEDED.get(target_kind, frozenset(_ALL_INTRIN))
        if target_kind in _loaded_kinds:
            return sys.modules["tvm"]
        pkg_loaded = _INTRIN_PKG in sys.modules
        if not pkg_loaded:
            for name in _ALL_INTRIN:
                full = f"{_INTRIN_PKG}.{name}"
                if name not in needed and full not in sys.modules:
                    sys.modules[full] = types.ModuleType(full)
                    _stubbed.add(name)
            import tvm.s_tir.tensor_intrin  # noqa: F401  (real package, stubbed members)
        else:
            # The package was imported already: make sure the needed members are real.
            import importlib

            for name in needed:
                if name in _stubbed:
                    full = f"{_INTRIN_PKG}.{name}"
                    del sys.modules[full]
                    _stubbed.discard(name)
                    mod = importlib.import_module(full)
                    setattr(sys.modules[_INTRIN_PKG], name, mod)
        _loaded_kinds.add(target_kind)
        return sys.modules["tvm"]


def ms() -> Any:
    """Return ``tvm.s_tir.meta_schedule`` (after :func:`load_tvm`)."""
    load_tvm()
    from tvm.s_tir import meta_schedule

    return meta_schedule
