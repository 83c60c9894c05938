"""Constant folding of weight-only arithmetic with numpy, before legalization.

With weights bound, a model computes much on constants alone: weight transposes (every linear
layer, every NHWC convolution), batch-norm scale and shift (``DecomposeOpsForInference``),
rotary tables, position ids and causal masks of a static length. TVM's ``FoldConstant`` after
``LegalizeOps`` computes each by compiling its kernel with LLVM, ~25-60 ms a kernel: it was 80-95%
of :func:`~tunecache.tvm_layer.frontend.prepare_for_tuning`'s time (0.97 s of 1.09 s on a
one-layer GPT-2, 2.8 s of 2.9 s on a small ResNet), the part of a ``tune="never"`` compile an
untuned ``tvm.compile`` does not pay. :func:`constant_values` computes these operators with numpy
before legalization and :func:`substitute_constants` puts the values in after it; what numpy
does not fold here stays for ``FoldConstant``.

A folded value must have the operator's static shape and dtype exactly, else the call is left as
it is; integer division, out-of-bounds ``take`` indices and types numpy lacks (``bfloat16``) are
never folded.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tunecache.tvm_layer import load_tvm

if TYPE_CHECKING:  # pragma: no cover
    import tvm

__all__ = ["constant_values", "kernel_values", "substitute_constants", "FOLD_MAX_ELEMENTS"]

#: Largest constant (in elements) folded here; larger ones are left to ``FoldConstant``.
FOLD_MAX_ELEMENTS = 1 << 26

_NUMPY_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                           "uint32", "uint64", "bool"})


def _ops() -> dict[str, Callable[..., Any]]:
    import numpy as np

    def floats(f: Callable[..., Any]) -> Callable[..., Any]:
        def g(call: Any, *xs: Any) -> Any:
            return f(*xs) if all(np.issubdtype(x.dtype, np.floating) for x in xs) else None
        return g

    def plain(f: Callable[..., Any]) -> Callable[..., Any]:
        return lambda call, *xs: f(*xs)

    def take(call: Any, x: Any, idx: Any) -> Any:
        axis = call.attrs.axis
        n = x.size if axis is None else x.shape[int(axis)]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            return None
        return np.take(x, idx, axis=None if axis is None else int(axis))

    def permute_dims(call: Any, x: Any) -> Any:
        axes = call.attrs.axes
        return np.transpose(x, None if axes is None else [int(a) for a in axes])

    def squeeze(call: Any, x: Any) -> Any:
        axis = call.attrs.axis
        return np.squeeze(x, None if axis is None else tuple(int(a) for a in axis))

    def like(fill: float) -> Callable[..., Any]:
        return lambda call, x: np.full(x.shape, fill, dtype=str(call.attrs.dtype or x.dtype) or x.dtype)

    return {
        "relax.add": plain(np.add), "relax.subtract": plain(np.subtract), "relax.multiply": plain(np.multiply),
        "relax.divide": floats(np.divide), "relax.power": floats(np.power),
        "relax.minimum": plain(np.minimum), "relax.maximum": plain(np.maximum),
        "relax.less": plain(np.less), "relax.less_equal": plain(np.less_equal), "relax.greater": plain(np.greater),
        "relax.greater_equal": plain(np.greater_equal), "relax.equal": plain(np.equal),
        "relax.not_equal": plain(np.not_equal), "relax.logical_and": plain(np.logical_and),
        "relax.logical_or": plain(np.logical_or), "relax.logical_not": plain(np.logical_not),
        "relax.where": plain(np.where),
        "relax.sqrt": floats(np.sqrt), "relax.rsqrt": floats(lambda x: 1 / np.sqrt(x)),
        "relax.exp": floats(np.exp), "relax.log": floats(np.log), "relax.cos": floats(np.cos),
        "relax.sin": floats(np.sin), "relax.negative": plain(np.negative), "relax.abs": plain(np.abs),
        "relax.astype": lambda call, x: x.astype(str(call.attrs.dtype)),
        "relax.permute_dims": permute_dims, "relax.squeeze": squeeze,
        "relax.expand_dims": lambda call, x: np.expand_dims(x, tuple(int(a) for a in call.attrs.axis)),
        "relax.reshape": lambda call, x, shape: np.reshape(x, shape),
        "relax.broadcast_to": lambda call, x, shape: np.broadcast_to(x, shape),
        "relax.concat": lambda call, xs: np.concatenate(xs, axis=int(call.attrs.axis)),
        "relax.take": take,
        "relax.arange": lambda call, start, end, step: np.arange(start, end, step, dtype=str(call.attrs.dtype)),
        "relax.full": lambda call, shape, fill: np.full(shape, fill, dtype=str(call.attrs.dtype)),
        "relax.zeros_like": like(0), "relax.ones_like": like(1),
    }


def constant_values(mod: tvm.IRModule) -> dict[Any, Any]:
    """The numpy value of every binding of ``mod``'s Relax functions computed from constants
    alone by an operator numpy folds here, by bound variable.

    Parameters
    ----------
    mod
        A Relax module before ``LegalizeOps`` (weights bound as constants).

    Returns
    -------
    dict
        ``{relax.Var: numpy.ndarray}``. ``LegalizeOps`` keeps the bound variables, so
        :func:`substitute_constants` can put the values in after it: the kernels legalization
        creates, and their names (task names, which workload keys depend on), stay what they
        were when ``FoldConstant`` computed these values.
    """
    tvm = load_tvm()
    import numpy as np
    from tvm import relax

    ops = _ops()
    const_type = tvm.ir.expr.Constant
    env: dict[Any, Any] = {}

    def value_of(expr: Any) -> Any:
        if isinstance(expr, relax.Var):
            return env.get(expr)
        if isinstance(expr, const_type):  # a tensor, or a scalar (a PrimValue)
            value = expr.value
            return value.numpy() if hasattr(value, "numpy") else value
        if isinstance(expr, relax.ShapeExpr):
            values = list(expr.values)
            return tuple(int(v) for v in values) if all(isinstance(v, tvm.tirx.IntImm) for v in values) else None
        if isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            return expr.value
        if isinstance(expr, relax.Tuple):
            fields = [value_of(f) for f in expr.fields]
            return None if any(f is None for f in fields) else fields
        return None

    def fold(call: Any) -> Any:
        fn = ops.get(getattr(call.op, "name", ""))
        ty = call.ty
        dtype, shape = getattr(ty, "dtype", None), getattr(ty, "shape", None)
        if fn is None or str(dtype) not in _NUMPY_DTYPES or shape is None or not hasattr(shape, "values"):
            return None
        if not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
            return None
        dims = [int(d) for d in shape.values]
        if int(np.prod(dims, dtype=np.int64)) > FOLD_MAX_ELEMENTS:
            return None
        args = [value_of(a) for a in call.args]
        if any(a is None for a in args):
            return None
        with np.errstate(all="ignore"):
            value = fn(call, *[a if isinstance(a, (list, tuple)) else np.asarray(a) for a in args])
        if value is None:
            return None
        value = np.ascontiguousarray(value)
        return value if value.dtype == np.dtype(str(dtype)) and list(value.shape) == dims else None

    for binding in _var_bindings(mod):
        v = binding.value
        if isinstance(v, relax.Call):
            value = fold(v)
            if value is not None:
                env[binding.var] = value
        elif isinstance(v, (relax.Var, const_type)):
            value = value_of(v)
            if value is not None and hasattr(value, "shape"):
                env[binding.var] = value
    return env


def _var_bindings(mod: tvm.IRModule) -> Iterator[Any]:
    """Every ``VarBinding`` of ``mod``'s Relax functions, in order."""
    from tvm import relax

    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding):
                    yield binding


def kernel_values(mod: tvm.IRModule, kernels: Collection[str]) -> dict[Any, Any]:
    """The numpy value of every call of the kernels ``kernels`` whose arguments are all constants.

    The kernels are run by :func:`~tunecache.tvm_layer.frontend.tir_eval.evaluate` (copies and
    re-layouts: a weight prepack split off a scheduled kernel). A call it declines is left out.

    Returns
    -------
    dict
        ``{relax.Var: tvm.runtime.Tensor}`` for :func:`substitute_constants`: each single-output
        call's variable, and each ``lv[i]`` taken from a multi-output call. The values are
        computed in place in the tensors that become the constants: VGG-16's 528 MB of weight
        re-layouts were 1.5 s of copies and fresh pages where the transposes take 0.1 s.
    """
    tvm = load_tvm()
    import numpy as np
    from tvm import relax

    from tunecache.tvm_layer.frontend.tir_eval import evaluate

    call_tir = tvm.ir.Op.get("relax.call_tir")
    const_type = tvm.ir.expr.Constant
    outputs: dict[int, list[Any]] = {}  # multi-output calls, by variable handle
    made: dict[int, tuple[Any, Any]] = {}  # (view, the tensor behind it) by the view's id; kept alive

    def empty(shape: list[int], dtype: Any) -> Any:
        tensor = tvm.runtime.empty(shape, str(dtype))
        view = np.from_dlpack(tensor)
        made[id(view)] = (view, tensor)
        return view

    env: dict[Any, Any] = {}
    for binding in _var_bindings(mod):
        v = binding.value
        if isinstance(v, relax.TupleGetItem) and isinstance(v.tuple_value, relax.Var):
            values = outputs.get(v.tuple_value.__chandle__())
            if values is not None and 0 <= int(v.index) < len(values):
                env[binding.var] = values[int(v.index)]
            continue
        if not (isinstance(v, relax.Call) and v.op.same_as(call_tir) and len(v.args) == 2):
            continue
        gv, args = v.args
        if not isinstance(gv, tvm.ir.GlobalVar) or gv.name_hint not in kernels:
            continue
        if not isinstance(args, relax.Tuple) or not all(isinstance(a, const_type) for a in args.fields):
            continue
        got = evaluate(mod[gv], [_host_view(a.value) for a in args.fields], empty)
        if got is None:
            continue
        got = [made[id(x)][1] if id(x) in made else x for x in got]
        if isinstance(binding.var.ty, relax.TupleType) or len(got) > 1:
            outputs[binding.var.__chandle__()] = got
        else:
            env[binding.var] = got[0]
    return env


def _host_view(tensor: Any) -> Any:
    """A CPU ``tvm.runtime.Tensor`` as a numpy array sharing its memory (a copy elsewhere)."""
    import numpy as np

    try:
        return np.from_dlpack(tensor)
    except (BufferError, TypeError, RuntimeError):
        return tensor.numpy()


def _as_tensor(value: Any) -> Any:
    """``value`` (numpy or ``tvm.runtime.Tensor``) as a ``tvm.runtime.Tensor`` of its own dtype:
    one copy of a numpy array (``relax.const(array, dtype)`` makes two), none of a tensor."""
    tvm = load_tvm()
    import numpy as np

    if isinstance(value, tvm.runtime.Tensor):
        return value
    value = np.asarray(value)
    return tvm.runtime.tensor(value if value.flags.c_contiguous else value.copy())


def substitute_constants(mod: tvm.IRModule, values: Mapping[Any, Any]) -> tuple[tvm.IRModule, int]:
    """Bind the variables of ``values`` (:func:`constant_values`) to their constant values.

    Returns
    -------
    tuple of (tvm.IRModule, int)
        The module, and how many bindings became constants (the calls they replace, and the
        kernels only those called, are left for ``DeadCodeElimination``).
    """
    load_tvm()
    from tvm import relax
    from tvm.relax import expr_functor

    count = 0

    @expr_functor.mutator
    class _Substitute(relax.PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:
            nonlocal count
            value = values.get(binding.var)
            if value is None:
                super().visit_var_binding_(binding)
                return
            count += 1
            self.builder_.emit_normalized(relax.VarBinding(binding.var, relax.const(_as_tensor(value))))

        def visit_dataflow_var_def_(self, var: Any) -> Any:
            return var

        def visit_var_def_(self, var: Any) -> Any:
            return var

    if not values:
        return mod, 0
    rewriter = _Substitute(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get(), count
