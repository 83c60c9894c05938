"""Run a data-movement ``PrimFunc`` (copies, transposes, weight re-layouts) on numpy arrays.

A kernel scheduled from a record that re-lays a weight out (MetaSchedule's ``RewriteLayout``) gets
its re-layout split into a ``*_weight_prepack`` kernel that the build folds into a constant once.
TVM's ``FoldConstant`` computes each such call by compiling its kernel with LLVM: ~0.07-0.1 s a
kernel, 2.2 s of a ResNet-18 compiled with predicted programs (22 kernels), for what is an index
permutation. :func:`evaluate` computes it with numpy instead, vectorized over the loop nest (a
few ms), and declines (returns ``None``) any function it does not fully understand, which then
stays for ``FoldConstant``.

What is understood: nested ``for`` loops with constant bounds around blocks whose body is one
buffer store, with block bindings, predicates, indices and values made of integer arithmetic
(``+ - * // %``, min, max, comparisons, logic, ``select``/``if_then_else``), casts, constants and
loads. Reductions (a block ``init``), conditionals as statements, allocations with dynamic
shapes, calls of other functions, and symbolic shapes are declined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["evaluate", "MAX_POINTS"]

#: Most loop iterations evaluated in one vectorized step (index arrays of ~32 MiB each); larger
#: nests run in chunks of their loops.
MAX_POINTS = 1 << 22
#: Most vectorized steps (loop bodies entered) in one evaluation; beyond it the function is
#: declined (left to LLVM).
MAX_STEPS = 4096


class _Decline(Exception):
    """Raised inside the evaluator for anything it does not understand."""


def _key(obj: Any) -> int:
    return int(obj.__chandle__())


def _loaded_buffer(load: Any) -> Any:
    """The buffer a load reads (``source`` in TVM 0.27, ``buffer`` before), or ``None``."""
    buf = getattr(load, "source", None)
    return buf if buf is not None else getattr(load, "buffer", None)


def _const_int(expr: Any) -> int:
    if type(expr).__name__ != "IntImm":
        raise _Decline(f"non-constant extent {expr}")
    return int(expr.value)


def _type_of(expr: Any) -> str:
    """An expression's dtype (TVM 0.27 names it ``ty``, a ``PrimType``; older ``dtype``)."""
    ty = getattr(expr, "ty", None)
    return str(ty) if ty is not None else str(expr.dtype)


def _dtype(np: Any, dtype: str) -> Any:
    try:
        return np.dtype(dtype)
    except TypeError as err:  # bfloat16, vectors, handles
        raise _Decline(f"dtype {dtype}") from err


class _Machine:
    """The state of one evaluation: buffers by handle, loop and block variables by handle."""

    def __init__(self, np: Any) -> None:
        self.np = np
        self.buffers: dict[int, Any] = {}
        self.points = 1  # iterations of the loops entered so far, per vectorized step
        self.steps = 0  # vectorized steps taken

    # --- expressions -------------------------------------------------------------------
    def expr(self, e: Any, env: dict[int, Any]) -> Any:
        np = self.np
        kind = type(e).__name__
        if kind in ("IntImm", "FloatImm"):
            return np.asarray(e.value, dtype=_dtype(np, _type_of(e)))
        if kind == "Var":
            value = env.get(_key(e))
            if value is None:
                raise _Decline(f"free variable {e}")
            return value
        if kind in _BINARY:
            return _BINARY[kind](np, self.expr(e.a, env), self.expr(e.b, env))
        if kind == "Not":
            return np.logical_not(self.expr(e.a, env))
        if kind == "Cast":
            return self.expr(e.value, env).astype(_dtype(np, _type_of(e)))
        if kind == "Select":
            return self._select(e.condition, e.true_value, e.false_value, env)
        if kind == "Call" and str(getattr(e.op, "name", "")).endswith(".if_then_else"):
            cond, yes, no = e.args
            return self._select(cond, yes, no, env)
        if kind in ("TensorLoad", "BufferLoad"):
            return self._load(e, env)
        raise _Decline(f"expression {kind}")

    def _select(self, cond: Any, yes: Any, no: Any, env: dict[int, Any]) -> Any:
        c = self.expr(cond, env)
        return self.np.where(c, self.expr(yes, env), self.expr(no, env))  # loads clip the masked lanes

    def _load(self, e: Any, env: dict[int, Any]) -> Any:
        np = self.np
        buf = _loaded_buffer(e)
        array = self.buffers.get(_key(buf)) if buf is not None else None
        if array is None:
            raise _Decline("load from an unknown buffer")
        idx = [self.expr(i, env) for i in e.indices]
        if len(idx) != array.ndim:
            raise _Decline("load with another rank than its buffer")
        # Lanes masked off by a select may index out of bounds: clip them (their value is unused).
        idx = [np.clip(i.astype(np.int64), 0, n - 1) for i, n in zip(idx, array.shape, strict=True)]
        return array[tuple(np.broadcast_arrays(*idx))] if idx else array[()]

    # --- statements --------------------------------------------------------------------
    def stmt(self, s: Any, env: dict[int, Any]) -> None:
        kind = type(s).__name__
        if kind == "SeqStmt":
            for part in s.seq:
                self.stmt(part, env)
        elif kind == "For":
            if env or not self._permute(s):
                self._for(s, env)
        elif kind == "SBlockRealize":
            self._block(s, env)
        elif kind == "BufferStore":
            self._store(s, env, None)
        else:
            raise _Decline(f"statement {kind}")

    def _for(self, s: Any, env: dict[int, Any]) -> None:
        np = self.np
        if getattr(s, "step", None) is not None and _const_int(s.step) != 1:
            raise _Decline("loop step")
        lo, n = _const_int(s.min), _const_int(s.extent)
        if n <= 0:
            return
        # Vectorized over at most MAX_POINTS iterations at once: a larger loop runs in chunks, in
        # order (an embedding-sized re-layout would need gigabytes of index arrays at once).
        chunk = max(1, min(n, MAX_POINTS // self.points))
        saved = self.points
        self.points *= chunk
        try:
            for start in range(lo, lo + n, chunk):
                self.steps += 1
                if self.steps > MAX_STEPS:
                    raise _Decline("loop nest too large")  # thousands of numpy passes: LLVM is faster
                inner = {k: v[..., None] for k, v in env.items()}  # a new innermost axis for every variable
                inner[_key(s.loop_var)] = np.arange(start, min(start + chunk, lo + n), dtype=np.int64)
                self.stmt(s.body, inner)
        finally:
            self.points = saved

    def _permute(self, s: Any) -> bool:
        """Compute an outermost loop nest that moves each element of one buffer to another,
        the positions on both sides mixed-radix splits and fusions of the loop variables (a
        weight re-layout such as ``w[v1 // 64, v0 // 64, v1 % 64 // 32, v0 % 64, v1 % 32] =
        a[v0, v1]``), as one numpy reshape and transpose; ``False`` leaves it to :meth:`_for`.

        The element-wise path builds an index array per buffer dimension and point: 1.8 s for
        VGG-16's 411 MB first dense weight, where the transpose takes a tenth of that.
        """
        extents: dict[int, int] = {}
        loop = s
        while type(loop).__name__ == "For":
            if _const_int(loop.min) != 0 or (getattr(loop, "step", None) is not None and _const_int(loop.step) != 1):
                return False
            extents[_key(loop.loop_var)] = _const_int(loop.extent)
            loop = loop.body
        if type(loop).__name__ != "SBlockRealize":
            return False
        block = loop.block
        pred = loop.predicate
        if block.init is not None or list(block.match_buffers) or list(block.alloc_buffers) or not (
                type(pred).__name__ == "IntImm" and int(pred.value) == 1):
            return False
        var_extent: dict[int, int] = {}  # block variable -> extent
        for iv, value in zip(block.iter_vars, loop.iter_values, strict=True):
            if type(value).__name__ != "Var" or _key(value) not in extents:
                return False
            var_extent[_key(iv.var)] = extents.pop(_key(value))
        store = block.body
        if extents or type(store).__name__ != "BufferStore":
            return False  # a loop variable no block variable binds, or more than one statement
        load = store.value
        if type(load).__name__ == "Cast":  # to the stored buffer's dtype
            load = load.value
        if type(load).__name__ not in ("BufferLoad", "TensorLoad"):
            return False
        src_buf = _loaded_buffer(load)
        src = self.buffers.get(_key(src_buf)) if src_buf is not None else None
        dst = self.buffers.get(_key(store.buffer))
        if src is None or dst is None or src is dst:
            return False
        read, written = _radix(load.indices, list(src.shape), var_extent), _radix(store.indices, list(dst.shape),
                                                                               var_extent)
        if read is None or written is None:
            return False
        sides = [read, written]
        cuts = _refine(sides, var_extent)
        if cuts is None:
            return False
        labels = [[fine for atom in side for fine in cuts[atom]] for side in sides]
        if sorted(labels[0]) != sorted(labels[1]):
            return False
        where = {a: i for i, a in enumerate(labels[0])}
        moved = src.reshape([a[2] for a in labels[0]]).transpose([where[a] for a in labels[1]])
        dst[...] = moved.reshape(dst.shape)
        return True

    def _block(self, realize: Any, env: dict[int, Any]) -> None:
        block = realize.block
        if block.init is not None or list(block.match_buffers):
            raise _Decline("reduction or matched buffers")
        for buf in block.alloc_buffers:
            self._alloc(buf)
        inner = dict(env)
        for iv, value in zip(block.iter_vars, realize.iter_values, strict=True):
            inner[_key(iv.var)] = self.expr(value, env)
        mask = None
        pred = realize.predicate
        if not (type(pred).__name__ == "IntImm" and int(pred.value) == 1):
            mask = self.expr(pred, env)
        body = block.body
        if type(body).__name__ == "BufferStore":
            self._store(body, inner, mask)
        elif mask is None:
            self.stmt(body, inner)
        else:
            raise _Decline("predicated block with a compound body")

    def _alloc(self, buf: Any) -> None:
        np = self.np
        shape = [_const_int(d) for d in buf.shape]
        self.buffers[_key(buf)] = np.zeros(shape, dtype=_dtype(np, str(buf.dtype)))

    def _store(self, s: Any, env: dict[int, Any], mask: Any) -> None:
        np = self.np
        array = self.buffers.get(_key(s.buffer))
        if array is None:
            raise _Decline("store to an unknown buffer")
        idx = [self.expr(i, env).astype(np.int64) for i in s.indices]
        if len(idx) != array.ndim:
            raise _Decline("store with another rank than its buffer")
        value = self.expr(s.value, env)
        parts = np.broadcast_arrays(*idx, value, *([] if mask is None else [mask]))
        idx, value = parts[:len(idx)], parts[len(idx)]
        if mask is not None:
            keep = parts[-1].astype(bool)
            idx, value = [i[keep] for i in idx], value[keep]
        for i, n in zip(idx, array.shape, strict=True):
            if i.size and (i.min() < 0 or i.max() >= n):
                raise _Decline("store out of bounds")
        array[tuple(idx)] = value.astype(array.dtype, copy=False)


_Atom = tuple[int, int, int]  # (variable, divisor, modulus): ``(v // divisor) % modulus``


def _terms(e: Any, var_extent: dict[int, int]) -> list[tuple[int, _Atom]] | None:
    """``e`` as a sum of ``coefficient * atom`` terms, or ``None``."""
    kind = type(e).__name__
    if kind == "Var":
        n = var_extent.get(_key(e))
        return None if n is None else [(1, (_key(e), 1, n))]
    if kind == "IntImm":
        return [] if int(e.value) == 0 else None
    if kind == "Add":
        a, b = _terms(e.a, var_extent), _terms(e.b, var_extent)
        return None if a is None or b is None else a + b
    if kind == "Mul":
        x, c = (e.a, e.b) if type(e.b).__name__ == "IntImm" else (e.b, e.a)
        inner = _terms(x, var_extent) if type(c).__name__ == "IntImm" else None
        return None if inner is None else [(k * int(c.value), atom) for k, atom in inner]
    if kind in ("FloorDiv", "FloorMod") and type(e.b).__name__ == "IntImm":
        inner, c = _terms(e.a, var_extent), int(e.b.value)
        if inner is None or len(inner) != 1 or inner[0][0] != 1 or c <= 0:
            return None
        v, d, m = inner[0][1]
        if m % c:
            return None  # a split that does not divide: padding, left to the element-wise path
        return [(1, (v, d * c, m // c) if kind == "FloorDiv" else (v, d, c))]
    return None


def _radix(indices: Any, shape: list[int], var_extent: dict[int, int]) -> list[_Atom] | None:
    """A buffer access's atoms in row-major order when its indices cover ``shape`` exactly, each
    dimension a mixed-radix number of atoms, each variable split into atoms without gaps."""
    if len(indices) != len(shape):
        return None
    atoms: list[_Atom] = []
    for index, n in zip(indices, shape, strict=True):
        terms = _terms(index, var_extent)
        if terms is None:
            return None
        terms.sort(key=lambda t: -t[0])
        if not _mixed_radix([(k, m) for k, (_, _, m) in terms], n):
            return None
        atoms += [atom for _, atom in terms]
    for v, n in var_extent.items():
        if not _mixed_radix([(d, m) for u, d, m in atoms if u == v], n):
            return None  # a variable used twice, or not at all (a broadcast)
    return atoms


def _mixed_radix(digits: list[tuple[int, int]], total: int) -> bool:
    """Whether ``(place, base)`` digits, in any order, count ``0 .. total - 1`` exactly once:
    the smallest place is 1, each next place the product of the bases below it."""
    stride = 1
    for place, base in sorted(digits):
        if place != stride:
            return False
        stride *= base
    return stride == total


def _refine(sides: list[list[_Atom]], var_extent: dict[int, int]) -> dict[_Atom, list[_Atom]] | None:
    """Each atom of ``sides`` as the finest atoms both sides' splits make of its variable (high
    to low), or ``None`` when the two sides' splits do not nest."""
    cuts: dict[int, set[int]] = {v: {1, n} for v, n in var_extent.items()}
    for side in sides:
        for v, d, m in side:
            cuts[v] |= {d, d * m}
    fine: dict[int, list[_Atom]] = {}
    for v, points in cuts.items():
        ordered = sorted(points)
        pairs = list(zip(ordered, ordered[1:], strict=False))
        if any(b % a for a, b in pairs):
            return None
        fine[v] = [(v, a, b // a) for a, b in pairs][::-1]
    return {atom: [f for f in fine[atom[0]] if atom[1] <= f[1] < atom[1] * atom[2]]
            for side in sides for atom in side}


def _binary() -> dict[str, Callable[[Any, Any, Any], Any]]:
    def floordiv(np: Any, a: Any, b: Any) -> Any:
        if np.issubdtype(np.result_type(a, b), np.integer):
            if np.any(b == 0):
                raise _Decline("division by zero")
            return np.floor_divide(a, b)
        return np.floor(a / b)

    def floormod(np: Any, a: Any, b: Any) -> Any:
        if np.any(b == 0):
            raise _Decline("modulo by zero")
        return np.mod(a, b)

    return {
        "Add": lambda np, a, b: a + b, "Sub": lambda np, a, b: a - b, "Mul": lambda np, a, b: a * b,
        "FloorDiv": floordiv, "FloorMod": floormod,
        "Min": lambda np, a, b: np.minimum(a, b), "Max": lambda np, a, b: np.maximum(a, b),
        "LT": lambda np, a, b: a < b, "LE": lambda np, a, b: a <= b, "GT": lambda np, a, b: a > b,
        "GE": lambda np, a, b: a >= b, "EQ": lambda np, a, b: a == b, "NE": lambda np, a, b: a != b,
        "And": lambda np, a, b: np.logical_and(a, b), "Or": lambda np, a, b: np.logical_or(a, b),
    }


_BINARY = _binary()


def evaluate(func: Any, inputs: Sequence[Any],
             empty: Callable[[list[int], Any], Any] | None = None) -> list[Any] | None:
    """Run ``func`` in destination-passing style on numpy ``inputs``; return its outputs.

    Parameters
    ----------
    func
        A ``tvm.tirx.PrimFunc`` whose first ``len(inputs)`` parameters are inputs and the rest
        outputs (as ``relax.call_tir`` calls it).
    inputs
        numpy arrays of the input parameters' shapes and dtypes.
    empty
        ``empty(shape, numpy_dtype)`` allocates each output (zero-filled here), e.g. a numpy view
        of a ``tvm.runtime.Tensor`` that becomes the constant without a copy; default
        ``numpy.zeros``.

    Returns
    -------
    list of numpy.ndarray or None
        The output parameters' values, or ``None`` when the function holds anything this
        evaluator does not understand (nothing is partly computed: the caller keeps the call).
    """
    import numpy as np

    m = _Machine(np)
    params = list(func.params)
    if len(inputs) >= len(params):
        return None
    try:
        for p, x in zip(params, inputs, strict=False):  # the rest are outputs
            if not hasattr(p, "shape"):
                raise _Decline("non-buffer parameter")
            shape = [_const_int(d) for d in p.shape]
            x = np.asarray(x)
            if list(x.shape) != shape or x.dtype != _dtype(np, str(p.dtype)):
                raise _Decline("input of another shape or dtype")
            m.buffers[_key(p)] = x
        outputs = []
        for p in params[len(inputs):]:
            if not hasattr(p, "shape"):
                raise _Decline("non-buffer parameter")
            if empty is None:
                m._alloc(p)
            else:
                out = empty([_const_int(d) for d in p.shape], _dtype(np, str(p.dtype)))
                out[...] = 0
                m.buffers[_key(p)] = out
            outputs.append(m.buffers[_key(p)])
        with np.errstate(all="ignore"):
            m.stmt(func.body, {})
    except _Decline:
        return None
    except (TypeError, ValueError, AttributeError, IndexError):  # an IR shape this code did not foresee
        return None
    return outputs
