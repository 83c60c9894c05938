"""``compile(..., dynamic=True)``: a model that compiles a variant for each new input shape.

A :class:`DynamicModel` keys every call on its inputs' shapes and dtypes. A key it has seen runs
the variant compiled for it; a new key compiles one first (through the injected
``compile_variant``: the store's hits, replays and fallbacks, with the tuning mode it was given)
and keeps the ``max_variants`` most recently used. This module sits below :mod:`tunecache.api`:
it never compiles anything itself.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from tunecache.errors import ConfigError
from tunecache.report import CompileReport

__all__ = ["DEFAULT_MAX_VARIANTS", "DynamicModel", "Variant", "VariantKey", "check_dynamic_model", "shape_key"]

#: Variants a :class:`DynamicModel` keeps when none is said (``compile``'s ``max_variants``).
DEFAULT_MAX_VARIANTS = 8

#: One ``(shape, dtype)`` per input, e.g. ``(((1, 3, 16, 16), "float32"),)``; or what a custom
#: ``key`` function returns.
VariantKey = Hashable


class Variant(Protocol):
    """What ``compile_variant`` returns: a callable model with a report (a ``CompiledModel``)."""

    report: CompileReport

    def __call__(self, *inputs: Any) -> Any: ...


def shape_key(inputs: tuple[Any, ...]) -> tuple[tuple[tuple[int, ...], str], ...]:
    """Return the variant key of ``inputs``: one ``(shape, dtype)`` per input.

    numpy arrays and torch tensors of the same shape and dtype share a key (``"float32"``, not
    ``"torch.float32"``): a compiled model takes either.

    Raises
    ------
    TypeError
        If an input is not array-like (it has no ``shape`` and ``dtype``), naming its position.

    Examples
    --------
    >>> import numpy as np
    >>> shape_key((np.zeros((2, 3), "float32"), np.zeros(4, "int64")))
    (((2, 3), 'float32'), ((4,), 'int64'))
    """
    key = []
    for i, x in enumerate(inputs):
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(
                f"input {i} is a {type(x).__name__}, not an array: a dynamic model takes numpy arrays or torch "
                "tensors (convert it with numpy.asarray or torch.as_tensor)")
        key.append((tuple(int(d) for d in shape), str(dtype).removeprefix("torch.")))
    return tuple(key)


def check_dynamic_model(model: Any) -> None:
    """Raise unless ``model`` can be compiled again at other input shapes (``dynamic=True``).

    Only a ``torch.nn.Module`` is re-exported at each new shape; an ONNX model, a Relax
    ``IRModule`` and a ``torch.export.ExportedProgram`` are fixed to the shapes they were made
    with.

    Raises
    ------
    ConfigError
        If ``model`` is not a ``torch.nn.Module``; the message says what to pass instead.
    """
    torch = sys.modules.get("torch")  # a torch module means torch is imported already; never import it here
    if torch is not None and isinstance(model, torch.nn.Module):
        return
    kind = (f"path {str(model)!r}" if isinstance(model, (str, os.PathLike))
            else f"{type(model).__module__}.{type(model).__name__}")
    if torch is not None and isinstance(model, torch.export.ExportedProgram):
        hint = "pass the torch.nn.Module it was exported from"
    else:
        hint = "pass the torch.nn.Module, or compile each shape separately with dynamic=False"
    raise ConfigError(
        f"dynamic=True needs a torch.nn.Module, which tunecache exports again at each new input shape; "
        f"got a {kind}, whose input shapes are fixed: {hint}")


class DynamicModel:
    """A model compiled once per input shape: call it like the original with any shape.

    The first call with a new key (:func:`shape_key`: each input's shape and dtype) compiles a
    variant with ``compile_variant(inputs)``; later calls with that key run it. The
    ``max_variants`` most recently used variants are kept; a key evicted and seen again is
    compiled again (from the store: its programs are there by then, or queued for tuning).

    Thread-safe: calls run concurrently; compiles run one at a time, and two threads calling
    with the same new key compile it once.

    Parameters
    ----------
    model
        The original model (kept for reference: ``compile_variant`` is what compiles it).
    compile_variant
        Compiles ``model`` for the given inputs (as ``example_inputs``) and returns the compiled
        model, e.g. ``lambda inputs: tunecache.compile(model, example_inputs=inputs, ...)``.
        Its errors propagate to the call; nothing is cached for a key that failed.
    max_variants
        How many variants to keep (least recently used evicted first).
    key
        The key of a call's inputs; default :func:`shape_key`. A key function decides which
        inputs it accepts (it raises ``TypeError`` for the others).

    Attributes
    ----------
    model
        The original model.
    max_variants
        How many variants are kept.

    Raises
    ------
    ConfigError
        If ``max_variants`` is not a whole number >= 1.

    Examples
    --------
    >>> dm = DynamicModel(net, lambda inputs: tunecache.compile(net, example_inputs=inputs))  # doctest: +SKIP
    >>> y1 = dm(torch.randn(1, 3, 16, 16)); y2 = dm(torch.randn(4, 3, 16, 16))              # doctest: +SKIP
    >>> list(dm.variants)                                                                     # doctest: +SKIP
    [(((1, 3, 16, 16), 'float32'),), (((4, 3, 16, 16), 'float32'),)]
    """

    def __init__(self, model: Any, compile_variant: Callable[[tuple[Any, ...]], Variant],
                 max_variants: int = DEFAULT_MAX_VARIANTS, *,
                 key: Callable[[tuple[Any, ...]], VariantKey] = shape_key) -> None:
        if isinstance(max_variants, bool) or not isinstance(max_variants, int) or max_variants < 1:
            raise ConfigError(f"max_variants must be a whole number >= 1, got {max_variants!r}")
        self.model = model
        self.max_variants = max_variants
        self._compile_variant = compile_variant
        self._key = key
        self._variants: OrderedDict[VariantKey, Variant] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()  # guards _variants
        self._compile_lock = threading.Lock()  # one compile (or refresh) at a time

    def __call__(self, *inputs: Any) -> Any:
        """Run the variant for the inputs' shapes, compiling it first when it is new.

        Raises
        ------
        TypeError
            If an input is not array-like (with the default ``key``).
        TunecacheError
            What ``compile_variant`` raises for a new shape (e.g. ``UnsupportedModelError``).
        """
        return self.variant(*inputs)(*inputs)

    def variant(self, *inputs: Any) -> Variant:
        """Return the variant for the inputs' shapes without running it; compile it when it is new.

        Compiling the example inputs' variant up front (``compile(..., dynamic=True)`` does)
        makes the first call fast and surfaces errors at compile time.
        """
        key = self._key(inputs)
        found = self._lookup(key)
        if found is not None:
            return found
        with self._compile_lock:
            found = self._lookup(key)  # another thread compiled it while this one waited
            if found is not None:
                return found
            compiled = self._compile_variant(tuple(inputs))
            with self._lock:
                self._variants[key] = compiled
                while len(self._variants) > self.max_variants:
                    self._variants.popitem(last=False)
            return compiled

    def _lookup(self, key: VariantKey) -> Variant | None:
        with self._lock:
            found = self._variants.get(key)
            if found is not None:
                self._variants.move_to_end(key)
            return found

    @property
    def variants(self) -> Mapping[VariantKey, CompileReport]:
        """The variants kept, least recently used first: key -> its compile report (a snapshot)."""
        with self._lock:
            return MappingProxyType({k: v.report for k, v in self._variants.items()})

    @property
    def report(self) -> CompileReport:
        """The compile report of the most recently used variant (the latest compiled, after a compile).

        Raises
        ------
        LookupError
            If no variant has been compiled yet.
        """
        with self._lock:
            if not self._variants:
                raise LookupError("no variant compiled yet: call the model (or .variant(*inputs)) first")
            return next(reversed(self._variants.values())).report

    def refresh(self) -> int:
        """Replace every variant by its ``refresh()`` (better programs from the store), in place.

        Variants without a ``refresh`` method are kept as they are.

        Returns
        -------
        int
            How many variants were replaced by a new compiled model.
        """
        replaced = 0
        with self._compile_lock:  # no compile adds a variant meanwhile
            with self._lock:
                current = list(self._variants.items())
            for key, old in current:
                refresh = getattr(old, "refresh", None)
                if not callable(refresh):
                    continue
                new = refresh()
                if new is None or new is old:
                    continue
                with self._lock:
                    if key in self._variants:  # a concurrent call only reorders: keep its order
                        self._variants[key] = new
                        replaced += 1
        return replaced

    def clear(self) -> None:
        """Forget every variant (the next call of each shape compiles again)."""
        with self._lock:
            self._variants.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._variants)

    def __repr__(self) -> str:
        with self._lock:
            n = len(self._variants)
        return f"<DynamicModel {type(self.model).__name__}: {n} of at most {self.max_variants} variants>"
