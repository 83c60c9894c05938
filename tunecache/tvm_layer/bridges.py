"""Bridges and plan tasks made real with TVM: a bridge's PrimFunc, its sketch check, and the
loop nests and decision signatures the TVM-free planner (:mod:`tunecache.reuse.planner`) needs.

* :func:`materialize_bridge` builds a real PrimFunc for a bridge (ETO Definition 5), mirroring
  the source's layout, dtype, padding and fused epilogue (bias add, residual add, ReLU),
  because those change the sketch set MetaSchedule generates;
* :func:`check_bridge` verifies the bridge samples the decisions of the tasks it bridges (their
  decision signature, :func:`tunecache.tvm_layer.sketch.decision_signature`: the sketch set with
  the instructions that sample nothing left out);
* :func:`describe_tasks` and :func:`bridge_checker` feed :func:`tunecache.reuse.planner.plan_tasks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tunecache.reuse.loopnest import LoopNest, canonical_roles
from tunecache.reuse.planner import PlanTask
from tunecache.store.keys import WorkloadKey

__all__ = ["BridgeCheck", "bridge_checker", "check_bridge", "describe_tasks", "materialize_bridge"]


# --------------------------------------------------------------------------------------------
# Materialization (TVM)


def _split_role(total: int, count: int) -> list[int]:
    """Spread ``total`` over ``count`` loops of one role: unit loops, then the total."""
    return [1] * (count - 1) + [total] if count else []


def _conv_sizes(nest: LoopNest, ext: dict[str, int]) -> tuple[int, int, int, list[int], list[int]]:
    fam = nest.family
    if fam == "depthwise_conv2d":
        mult = int(nest.param("channel_multiplier", 1) or 1)
        if ext["K"] % mult:
            mult = 1
        groups = ext["K"] // mult
        c_in, k_out = groups, ext["K"]
    elif fam == "group_conv2d":
        groups = ext["G"]
        c_in, k_out = groups * ext["C"], groups * ext["K"]
    else:
        groups, c_in, k_out = 1, ext["C"], ext["K"]
    out_sp = [ext[r] for r in ("OD", "OH", "OW") if r in ext]
    ker = [ext[r] for r in ("KD", "KH", "KW") if r in ext]
    return groups, c_in, k_out, out_sp, ker


def _conv_padding(nest: LoopNest, out_sp: list[int], ker: list[int]) -> tuple[list[int], list[int]]:
    """Mirror the source's padding (it decides whether MetaSchedule inlines ``pad_temp``)."""
    rank = len(out_sp)
    pad = list(nest.param("padding", (0,) * (2 * rank)) or (0,) * (2 * rank))
    before, after = pad[:rank], pad[rank:]
    sizes = []
    for d in range(rank):
        # stride 1, dilation 1: in = out + k - 1 - before - after, kept >= 1
        while out_sp[d] + ker[d] - 1 - before[d] - after[d] < 1:
            if after[d] >= before[d] and after[d] > 0:
                after[d] -= 1
            elif before[d] > 0:
                before[d] -= 1
        sizes.append(out_sp[d] + ker[d] - 1 - before[d] - after[d])
    return sizes, before + after


def _shape_by_layout(layout: str, sizes: dict[str, int]) -> list[int]:
    return [sizes[ch] for ch in layout]


def _build_conv(nest: LoopNest, ext: dict[str, int]) -> tuple[list[Any], Any]:
    from tvm import te, topi

    groups, c_in, k_out, out_sp, ker = _conv_sizes(nest, ext)
    data_layout, kernel_layout = nest.layout.split("/")
    if sorted(kernel_layout) != sorted(data_layout.replace("N", "O").replace("C", "I")):
        raise ValueError(
            f"materialize_bridge: cannot build a {nest.family} with layout {nest.layout!r} "
            "(only layouts TOPI's generic conv accepts, e.g. NCHW/OIHW, NHWC/HWIO)"
        )
    spatial_letters = [ch for ch in data_layout if ch in "DHW"]
    out_dtype = nest.param("out_dtype", nest.dtype)
    if nest.family == "conv2d_transpose":
        # No padding: out = (in - 1) * s + k. A stride > 1 adds a dilation block to the task,
        # so keep the source's stride where the extents allow it, else ETO's default of 1.
        strides = []
        for o, k, s in zip(out_sp, ker, nest.param("strides", (1, 1)) or (1, 1), strict=False):
            strides.append(s if s > 1 and o >= k and (o - k) % s == 0 else 1)
        in_sp = [(o - k) // s + 1 for o, k, s in zip(out_sp, ker, strides, strict=False)]
        if min(in_sp) < 1:
            raise ValueError(f"conv2d_transpose bridge: kernel {ker} larger than output {out_sp}")
        data = te.placeholder((ext["N"], c_in, *in_sp), nest.dtype, name="data")
        kernel = te.placeholder((c_in, k_out, *ker), nest.dtype, name="kernel")
        out = topi.nn.conv2d_transpose_nchw(data, kernel, strides, (0, 0, 0, 0), out_dtype, (0, 0))
        return [data, kernel], out
    in_sp, padding = _conv_padding(nest, out_sp, ker)
    dsizes = {"N": ext["N"], "C": c_in, **dict(zip(spatial_letters, in_sp, strict=False))}
    ksizes = {"O": k_out, "I": c_in // groups, **dict(zip(spatial_letters, ker, strict=False))}
    data = te.placeholder(_shape_by_layout(data_layout, dsizes), nest.dtype, name="data")
    kernel = te.placeholder(_shape_by_layout(kernel_layout, ksizes), nest.dtype, name="kernel")
    rank = len(out_sp)
    out = topi.nn.conv(
        data, kernel, [1] * rank, padding, [1] * rank, groups, data_layout, kernel_layout, out_dtype
    )
    return [data, kernel], out


def _build_matmul(nest: LoopNest, ext: dict[str, int]) -> tuple[list[Any], Any]:
    from tvm import te

    a_layout, b_layout = nest.layout.split("/")
    counts = {r: nest.roles.count(r) for r in ("B", "M", "N")}
    per_loop = {r: _split_role(ext.get(r, 1), counts[r]) for r in counts}
    out_roles = [r for r in nest.roles if r != "K"]

    def dims(layout: str) -> list[tuple[str, int]]:
        seen = {r: 0 for r in "BMN"}
        out = []
        for ch in layout:
            if ch == "K":
                out.append(("K", 0))
            elif ch in seen:
                out.append((ch, seen[ch]))
                seen[ch] += 1
            else:  # "1": a unit dim
                out.append(("1", 0))
        return out

    def shape(layout: str) -> list[int]:
        return [
            ext["K"] if r == "K" else 1 if r == "1" else per_loop[r][i] for r, i in dims(layout)
        ]

    out_dims, seen = [], {r: 0 for r in "BMN"}
    for r in out_roles:
        out_dims.append((r, seen[r]))
        seen[r] += 1
    out_dtype = nest.param("out_dtype", nest.dtype)
    a = te.placeholder(shape(a_layout), nest.dtype, name="A")
    b = te.placeholder(shape(b_layout), nest.dtype, name="B")
    k = te.reduce_axis((0, ext["K"]), name="k")

    def compute(*idx: Any) -> Any:
        pos = dict(zip(out_dims, idx, strict=False))

        def index(layout: str) -> list[Any]:
            return [k if r == "K" else 0 if r == "1" else pos[(r, i)] for r, i in dims(layout)]

        x, y = a(*index(a_layout)), b(*index(b_layout))
        if out_dtype != nest.dtype:
            x, y = x.astype(out_dtype), y.astype(out_dtype)
        return te.sum(x * y, axis=k)

    out_shape = [per_loop[r][i] for r, i in out_dims]
    return [a, b], te.compute(out_shape, compute, name="matmul")


def _relu_fn(src: Any) -> Any:
    from tvm import te

    return lambda *idx: te.max(src(*idx), te.const(0, src.dtype))


def _binary_fn(src: Any, operand: Any, pattern: str, f: Any) -> Any:
    """``src op operand``, the operand broadcast per ``pattern`` (aligned at trailing dims)."""
    off = len(src.shape) - len(pattern)

    def fn(*idx: Any) -> Any:
        sub = [idx[off + d] if p == "x" else 0 for d, p in enumerate(pattern)]
        return f(src(*idx), operand(*sub))

    return fn


def _apply_epilogue(out: Any, ops: Sequence[str]) -> tuple[list[Any], Any]:
    from tvm import te

    extra: list[Any] = []
    shape = [int(s) for s in out.shape]
    binary = {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "div": lambda x, y: x / y,
    }
    for i, op in enumerate(ops):
        name, _, pattern = op.partition(":")
        if name == "relu":
            out = te.compute(shape, _relu_fn(out), name="relu")
        elif name in binary and pattern and set(pattern) <= {"x", "1"}:
            tail = shape[len(shape) - len(pattern):]
            operand = te.placeholder(
                [t if p == "x" else 1 for p, t in zip(pattern, tail, strict=False)], out.dtype, name=f"p{i}"
            )
            extra.append(operand)
            fn = _binary_fn(out, operand, pattern, binary[name])
            out = te.compute(shape, fn, name=f"T_{name}")
        else:
            raise ValueError(
                f"materialize_bridge: cannot mirror epilogue op {op!r}; "
                "pass epilogue=False to build the bare operator"
            )
    return extra, out


def materialize_bridge(nest: LoopNest, extents: Sequence[int], *, epilogue: bool = True) -> Any:
    """Build a PrimFunc of ``nest``'s family with the given canonical extents.

    Parameters
    ----------
    nest
        A source task's loop nest: its family, layout, dtype, padding and epilogue are
        mirrored (they shape the sketch set).
    extents
        Canonical extents of the bridge (e.g. from :func:`bridge_extents`).
    epilogue
        Mirror the source's fused epilogue (bias add, residual add, ReLU). Without it the
        bridge is the bare operator, whose sketch set differs from a fused task's.

    Returns
    -------
    tvm.IRModule
        ``{"main": PrimFunc}``, built with TOPI / ``te.compute``, stride 1 and dilation 1.

    Raises
    ------
    ValueError
        If the family is ``other``, the extents do not fit the family, or an epilogue op
        cannot be mirrored.
    """
    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm()
    from tvm import te

    roles = canonical_roles(nest.family)
    if not roles:
        raise ValueError(
            f"materialize_bridge: family {nest.family!r} has no canonical form to build"
        )
    ext_t = tuple(int(e) for e in extents)
    if len(ext_t) != len(roles) or min(ext_t) < 1:
        raise ValueError(
            f"materialize_bridge: {nest.family} needs {len(roles)} extents >= 1 "
            f"({', '.join(roles)}), got {list(ext_t)}"
        )
    ext = dict(zip(roles, ext_t, strict=False))
    if nest.family in ("matmul", "batch_matmul"):
        inputs, out = _build_matmul(nest, ext)
    else:
        inputs, out = _build_conv(nest, ext)
    extra: list[Any] = []
    if epilogue and nest.epilogue:
        extra, out = _apply_epilogue(out, nest.epilogue)
    func = te.create_prim_func([*inputs, *extra, out])
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BridgeCheck:
    """Result of :func:`check_bridge`.

    Attributes
    ----------
    ok
        True when the bridge has the family and the decision signature of every source.
    bridge_sketch
        The bridge's decision signature.
    source_sketches
        The sources' decision signatures, in the order given.
    reason
        Empty when ``ok``, else what differed.
    """

    ok: bool
    bridge_sketch: str
    source_sketches: tuple[str, ...]
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def check_bridge(bridge_mod: Any, source_mod: Any, target: Any) -> BridgeCheck:
    """Verify that a bridge has the family and decision signature of the task(s) it bridges.

    Parameters
    ----------
    bridge_mod
        The bridge (from :func:`materialize_bridge`).
    source_mod
        One task module, or a sequence of them (typically the two tasks it bridges).
    target
        A ``tvm.target.Target`` or a target dict.

    Returns
    -------
    BridgeCheck
        Truthy when every source matches.
    """
    from tunecache.tvm_layer.loopnest import analyze
    from tunecache.tvm_layer.sketch import decision_signature

    sources = list(source_mod) if isinstance(source_mod, (list, tuple)) else [source_mod]
    bridge_nest = analyze(bridge_mod)
    bridge_sig = decision_signature(bridge_mod, target)
    sigs, problems = [], []
    for i, src in enumerate(sources):
        nest = analyze(src)
        sig = decision_signature(src, target)
        sigs.append(sig)
        if nest.family != bridge_nest.family:
            problems.append(f"source {i} is {nest.family}, the bridge {bridge_nest.family}")
        elif sig != bridge_sig:
            problems.append(f"source {i} has sketch {sig}, the bridge {bridge_sig}")
        elif not all(x >= y for x, y in zip(nest.extents, bridge_nest.extents, strict=False)):
            problems.append(
                f"source {i} extents {list(nest.extents)} do not dominate the bridge's "
                f"{list(bridge_nest.extents)}"
            )
    return BridgeCheck(not problems, bridge_sig, tuple(sigs), "; ".join(problems))


def describe_tasks(items: Sequence[tuple[WorkloadKey, str, float, Any]], target: Any) -> list[PlanTask]:
    """Analyze (key, name, weight, TIR module) items into :class:`PlanTask` values (needs TVM)."""
    from tunecache.tvm_layer.loopnest import analyze
    from tunecache.tvm_layer.sketch import decision_digest, decision_texts
    from tunecache.tvm_layer.threads import thread_map

    def describe(item: tuple[WorkloadKey, str, float, Any]) -> PlanTask:
        key, name, weight, mod = item
        try:
            nest = analyze(mod)
        except Exception:  # noqa: BLE001 - a task the analysis cannot read is tuned from scratch
            nest = LoopNest("other", (), (), "", "", signature=f"unanalysable:{key.shash}")
        texts = decision_texts(mod, target)  # a design space: TVM's C++, one task per core
        trivial = len(texts) == 1 and not texts[0]  # one sketch that samples nothing
        return PlanTask(key, name, float(weight), nest, decision_digest(texts), trivial)

    return thread_map(describe, list(items), name="tunecache-describe")


def bridge_checker(target: Any) -> Callable[[LoopNest, Sequence[PlanTask]], bool]:
    """Return a ``bridge_check`` that materializes a bridge and compares its decision signature."""
    from tunecache.tvm_layer.sketch import decision_signature

    def check(nest: LoopNest, users: Sequence[PlanTask]) -> bool:
        try:
            mod = materialize_bridge(nest, nest.extents)
        except (ValueError, NotImplementedError):
            return False
        sig = decision_signature(mod, target)
        return all(sig == u.sketch for u in users)

    return check
