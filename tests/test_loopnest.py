"""Major loop nests, sketch signatures, reuse conditions and bridge operators (ETO §3, §6.2)."""

from __future__ import annotations

import pytest
from _models import te_conv as _te_conv  # noqa: E402
from _models import te_matmul as _te_matmul
from hypothesis import given, settings
from hypothesis import strategies as st

from tunecache.reuse.bridge import bridge_candidates, bridge_extents
from tunecache.reuse.conditions import can_reuse, dominates
from tunecache.reuse.loopnest import LoopNest, canonical_roles

TARGET = {"kind": "llvm", "num-cores": 2}
ETO_A = (1, 64, 14, 14, 64, 3, 3)
ETO_B = (1, 64, 28, 28, 64, 1, 1)
ETO_BRIDGE = (1, 64, 14, 14, 64, 1, 1)


def _nest(extents: tuple[int, ...], family: str = "conv2d") -> LoopNest:
    n_red = 3 if family == "conv2d" else 1
    space, red = extents[:-n_red], extents[-n_red:]
    assert len(extents) == len(canonical_roles(family))
    return LoopNest(family, space, red, "float32", "anchor", "sig", layout="NCHW/OIHW")


# ---------------------------------------------------------------------------- pure, no TVM


def test_dominates_is_elementwise() -> None:
    assert dominates(ETO_B, (1, 64, 14, 14, 64, 1, 1))
    assert not dominates(ETO_A, ETO_B) and not dominates(ETO_B, ETO_A)
    assert not dominates((2, 2), (1, 1, 1))


def test_can_reuse_eto_pair_has_no_dominance() -> None:
    v = can_reuse(_nest(ETO_A), _nest(ETO_B), "k", "k")
    assert not v and v.reason == "no dominance"
    v = can_reuse(_nest(ETO_A), _nest(ETO_BRIDGE), "k", "k")
    assert v and v.reason == "a dominates b"
    assert can_reuse(_nest(ETO_A), _nest(ETO_A), "k", "k").reason == "same extents"
    assert can_reuse(_nest(ETO_A), _nest(ETO_BRIDGE), "k", "other").reason == "different sketch"


def test_bridge_extents_and_hops() -> None:
    assert bridge_extents(ETO_A, ETO_B) == ETO_BRIDGE
    assert bridge_candidates([ETO_A, ETO_B]) == [ETO_BRIDGE]
    three = [(4, 1, 1), (1, 4, 1), (1, 1, 4)]
    assert sorted(bridge_candidates(three)) == [(1, 1, 1)]
    assert bridge_candidates([(4, 2, 1), (1, 4, 2), (2, 1, 4)], hops=1) == [
        (1, 2, 1), (2, 1, 1), (1, 1, 2)
    ]
    assert bridge_candidates([(4, 2, 1), (1, 4, 2), (2, 1, 4)], hops=2)[-1] == (1, 1, 1)
    with pytest.raises(ValueError):
        bridge_extents((1, 2), (1, 2, 3))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(
    lambda n: st.tuples(*(st.lists(st.integers(1, 64), min_size=n, max_size=n) for _ in range(3)))
))
def test_bridge_is_the_greatest_common_lower_bound(abh: tuple[list[int], ...]) -> None:
    a, b, h = abh
    g = bridge_extents(a, b)
    assert dominates(a, g) and dominates(b, g)
    common = tuple(min(x, y, z) for x, y, z in zip(a, b, h, strict=False))  # dominated by both a and b
    assert dominates(g, common)
    va = can_reuse(_nest_n(a), _nest_n(g), "k", "k")
    assert va.ok and va.reason in ("a dominates b", "same extents")
    assert can_reuse(_nest_n(a), _nest_n(b), "k", "k").ok == (dominates(a, b) or dominates(b, a))


def _nest_n(extents: list[int] | tuple[int, ...]) -> LoopNest:
    return LoopNest("other", tuple(extents), (), "float32", "anchor", "sig")


# ---------------------------------------------------------------------------- TVM helpers


def _torch_tasks(tvm, model, example):
    torch = pytest.importorskip("torch")
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    from tvm.s_tir import meta_schedule as ms

    with torch.no_grad():
        ep = torch.export.export(model.eval(), (example,))
    mod = from_exported_program(ep, keep_params_as_input=True)
    mod, _ = relax.frontend.detach_params(mod)
    mod = tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)
    tasks = ms.relax_integration.extract_tasks(mod, tvm.target.Target(TARGET))
    return {t.task_name: t.dispatched[0] for t in tasks}


# ---------------------------------------------------------------------------- TVM tests


@pytest.mark.tvm
def test_eto_conv_pair_bridge(tvm) -> None:
    from tunecache.tvm_layer.bridges import check_bridge, materialize_bridge
    from tunecache.tvm_layer.loopnest import analyze
    from tunecache.tvm_layer.sketch import sketch_signature

    # Unpadded 3x3 (as in ETO's example, which assumes equal sketch sets) and a 1x1.
    a_mod = _te_conv(tvm, (1, 64, 16, 16), 3, 64)
    b_mod = _te_conv(tvm, (1, 64, 28, 28), 1, 64)
    a, b = analyze(a_mod), analyze(b_mod)
    assert (a.family, a.extents) == ("conv2d", ETO_A)
    assert (b.family, b.extents) == ("conv2d", ETO_B)
    sa, sb = sketch_signature(a_mod, TARGET), sketch_signature(b_mod, TARGET)
    assert sa == sb  # LLVM: an unpadded 3x3 and a 1x1 share their sketch set
    verdict = can_reuse(a, b, sa, sb)
    assert not verdict and verdict.reason == "no dominance"

    g_ext = bridge_extents(a, b)
    assert g_ext == ETO_BRIDGE
    g_mod = materialize_bridge(b, g_ext)
    g = analyze(g_mod)
    assert (g.family, g.extents, g.layout) == ("conv2d", ETO_BRIDGE, "NCHW/OIHW")
    assert sketch_signature(g_mod, TARGET) == sb
    assert check_bridge(g_mod, [a_mod, b_mod], TARGET)
    assert can_reuse(a, g, sa, sb).reason == "a dominates b"
    assert can_reuse(g, b, sb, sb).reason == "b dominates a"


@pytest.mark.tvm
def test_padded_3x3_and_1x1_differ_in_sketch_but_share_decisions(tvm) -> None:
    """ResNet's 3x3 convs are padded: pad_temp is compute-at'ed, not inlined (another sketch, one
    more sampled compute location). Tilings and unroll are the same decisions, so the decision
    signature, which leaves compute locations to the narrowed search, pairs them."""
    from tunecache.tvm_layer.bridges import check_bridge, materialize_bridge
    from tunecache.tvm_layer.loopnest import analyze
    from tunecache.tvm_layer.sketch import decision_signature, decision_texts, sketch_signature

    a_mod = _te_conv(tvm, (1, 64, 14, 14), 3, 64, pad=1)
    b_mod = _te_conv(tvm, (1, 64, 28, 28), 1, 64)
    a, b = analyze(a_mod), analyze(b_mod)
    assert a.extents == ETO_A and a.param("padding") == (1, 1, 1, 1)
    sa, sb = sketch_signature(a_mod, TARGET), sketch_signature(b_mod, TARGET)
    assert sa != sb
    assert can_reuse(a, b, sa, sb).reason == "different sketch"
    (extra,) = set("\n".join(decision_texts(a_mod, TARGET)).split("\n")) - set(
        "\n".join(decision_texts(b_mod, TARGET)).split("\n"))
    assert extra.startswith("SampleComputeLocation")
    da, db = decision_signature(a_mod, TARGET), decision_signature(b_mod, TARGET)
    assert da == db
    assert can_reuse(a, b, da, db).reason == "no dominance"
    # A bridge built from the padded side mirrors its padding; both sides can reuse it.
    g_mod = materialize_bridge(a, ETO_BRIDGE)
    assert analyze(g_mod).extents == ETO_BRIDGE
    assert sketch_signature(g_mod, TARGET) == sa
    assert check_bridge(g_mod, [a_mod, b_mod], TARGET)


@pytest.mark.tvm
def test_sketch_signature_matmul_vs_conv(tvm) -> None:
    from tunecache.tvm_layer.sketch import sketch_set, sketch_signature

    m1 = sketch_signature(_te_matmul(tvm, 128, 64, 256), TARGET)
    m2 = sketch_signature(_te_matmul(tvm, 512, 512, 512), TARGET)
    m3 = sketch_signature(_te_matmul(tvm, 7, 13, 17), TARGET)
    conv = sketch_signature(_te_conv(tvm, (1, 64, 28, 28), 1, 64), TARGET)
    assert m1 == m2 == m3 and len(m1) == 16
    assert conv != m1
    assert len(sketch_set(_te_matmul(tvm, 128, 64, 256), TARGET)) >= 1


@pytest.mark.tvm
def test_nhwc_and_nchw_have_same_canonical_extents(tvm) -> None:
    from tunecache.tvm_layer.loopnest import analyze

    nchw = analyze(_te_conv(tvm, (1, 64, 16, 16), 3, 32, stride=1))
    nhwc = analyze(_te_conv(tvm, (1, 16, 16, 64), 3, 32, stride=1, layout="NHWC"))
    assert nchw.family == nhwc.family == "conv2d"
    assert nchw.extents == nhwc.extents == (1, 32, 14, 14, 64, 3, 3)
    assert (nchw.layout, nhwc.layout) == ("NCHW/OIHW", "NHWC/HWIO")
    assert nhwc.roles == ("N", "OH", "OW", "K", "KH", "KW", "C")
    assert can_reuse(nchw, nhwc, "k", "k").reason == "different layout"
    strided = analyze(_te_conv(tvm, (1, 16, 16, 64), 3, 32, pad=1, stride=2, layout="NHWC"))
    assert strided.extents == (1, 32, 8, 8, 64, 3, 3) and strided.param("strides") == (2, 2)


@pytest.mark.tvm
def test_relax_conv_variants(tvm) -> None:
    """Families from access patterns: conv1d/3d, grouped, depthwise, transposed (Relax ops)."""
    from tvm import relax

    from tunecache.tvm_layer.bridges import check_bridge, materialize_bridge
    from tunecache.tvm_layer.loopnest import analyze

    def legalized(x_shape, w_shape, op):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(x_shape, "float32"))
        w = relax.Var("w", relax.TensorType(w_shape, "float32"))
        with bb.function("main", [x, w]):
            with bb.dataflow():
                out = bb.emit_output(bb.emit(op(x, w)))
            bb.emit_func_output(out)
        mod = relax.transform.LegalizeOps()(bb.get())
        (func,) = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
        return tvm.IRModule({"main": func})

    nn = relax.op.nn
    cases = [
        ((1, 16, 20), (32, 16, 3), lambda x, w: nn.conv1d(x, w, dilation=2),
         "conv1d", (1, 32, 16, 16, 3)),
        ((1, 8, 6, 6, 6), (4, 8, 3, 3, 3), lambda x, w: nn.conv3d(x, w),
         "conv3d", (1, 4, 4, 4, 4, 8, 3, 3, 3)),
        ((1, 16, 14, 14), (32, 4, 3, 3), lambda x, w: nn.conv2d(x, w, groups=4),
         "group_conv2d", (1, 4, 8, 12, 12, 4, 3, 3)),
        ((1, 16, 14, 14), (16, 1, 3, 3), lambda x, w: nn.conv2d(x, w, padding=1, groups=16),
         "depthwise_conv2d", (1, 16, 14, 14, 3, 3)),
        ((1, 14, 14, 16), (3, 3, 1, 16),
         lambda x, w: nn.conv2d(x, w, groups=16, data_layout="NHWC", kernel_layout="HWIO"),
         "depthwise_conv2d", (1, 16, 12, 12, 3, 3)),
        ((1, 16, 14, 14), (16, 8, 3, 3), lambda x, w: nn.conv2d_transpose(x, w, strides=2, padding=1),
         "conv2d_transpose", (1, 8, 27, 27, 16, 3, 3)),
    ]
    for x_shape, w_shape, op, family, extents in cases:
        mod = legalized(x_shape, w_shape, op)
        nest = analyze(mod)
        assert (nest.family, nest.extents) == (family, extents), (family, nest)
        smaller = tuple(max(1, e // 2) if i and e > 4 else e for i, e in enumerate(extents))
        assert check_bridge(materialize_bridge(nest, smaller), mod, TARGET), family


@pytest.fixture(scope="module")
def resnet_tasks(tvm):
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin: int, c: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, c, 3, stride, 1)
            self.c2 = nn.Conv2d(c, c, 3, 1, 1)
            self.sc = nn.Conv2d(cin, c, 1, stride) if stride != 1 or cin != c else None

        def forward(self, x):
            y = self.c2(torch.relu(self.c1(x)))
            return torch.relu(y + (self.sc(x) if self.sc is not None else x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, 1, 1)
            self.b1, self.b2 = Block(16, 16, 1), Block(16, 32, 2)
            self.dw = nn.Conv2d(32, 32, 3, 1, 1, groups=32)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.dw(self.b2(self.b1(torch.relu(self.stem(x)))))
            return self.fc(x.mean((2, 3)))

    torch.manual_seed(0)
    return _torch_tasks(tvm, Net(), torch.randn(1, 3, 32, 32))


@pytest.mark.tvm
def test_resnet_fused_tasks(tvm, resnet_tasks) -> None:
    from tunecache.tvm_layer.bridges import check_bridge, materialize_bridge
    from tunecache.tvm_layer.loopnest import analyze
    from tunecache.tvm_layer.sketch import sketch_signature

    nests = {name: analyze(mod) for name, mod in resnet_tasks.items()}
    by_extents = {(n.family, n.extents, n.epilogue) for n in nests.values()}
    relu = ("add:1x11", "relu")
    residual = ("add:1x11", "add:1xxx", "relu")
    assert ("conv2d", (1, 16, 32, 32, 3, 3, 3), relu) in by_extents  # stem
    assert ("conv2d", (1, 16, 32, 32, 16, 3, 3), residual) in by_extents
    assert ("conv2d", (1, 32, 16, 16, 16, 3, 3), relu) in by_extents  # stride 2
    assert ("conv2d", (1, 32, 16, 16, 16, 1, 1), ("add:1x11",)) in by_extents  # shortcut
    assert ("depthwise_conv2d", (1, 32, 16, 16, 3, 3), ("add:1x11",)) in by_extents
    assert ("matmul", (1, 10, 32), ("add:x",)) in by_extents
    assert {n.family for n in nests.values()} <= {"conv2d", "depthwise_conv2d", "matmul", "other"}

    # Same epilogue, different shapes and strides: same sketch set; the larger dominates.
    (stem,) = [resnet_tasks[k] for k, n in nests.items() if n.extents == (1, 16, 32, 32, 3, 3, 3)]
    (down,) = [resnet_tasks[k] for k, n in nests.items() if n.extents == (1, 32, 16, 16, 16, 3, 3)]
    s_stem, s_down = sketch_signature(stem, TARGET), sketch_signature(down, TARGET)
    assert s_stem == s_down
    assert can_reuse(analyze(stem), analyze(down), s_stem, s_down).reason == "no dominance"
    g = bridge_extents(analyze(stem), analyze(down))
    assert g == (1, 16, 16, 16, 3, 3, 3)
    assert check_bridge(materialize_bridge(analyze(stem), g), [stem, down], TARGET)

    # Another epilogue (the residual add): another sketch set, the same decisions. The planner
    # pairs them by decision signature; the narrowed search moves decisions between sketches.
    from tunecache.tvm_layer.sketch import decision_signature

    (res,) = [resnet_tasks[k] for k, n in nests.items() if n.epilogue == residual and n.extents[0:4] == (1, 16, 32, 32)]
    assert sketch_signature(res, TARGET) != s_stem
    assert decision_signature(res, TARGET) == decision_signature(stem, TARGET)
    assert can_reuse(analyze(res), analyze(stem), decision_signature(res, TARGET),
                     decision_signature(stem, TARGET)).reason == "a dominates b"

    # A depthwise conv never pairs with a dense conv2d.
    (dw_name,) = [k for k, n in nests.items() if n.family == "depthwise_conv2d"]
    (sc_name,) = [k for k, n in nests.items() if n.extents == (1, 32, 16, 16, 16, 1, 1)]
    dw, sc = resnet_tasks[dw_name], resnet_tasks[sc_name]
    verdict = can_reuse(nests[dw_name], nests[sc_name], sketch_signature(dw, TARGET),
                        sketch_signature(sc, TARGET))
    assert not verdict and verdict.reason == "different family"
    assert nests[dw_name].param("groups") == 32


@pytest.mark.tvm
def test_bert_layer_tasks(tvm) -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    from tunecache.tvm_layer.loopnest import analyze
    from tunecache.tvm_layer.sketch import sketch_signature

    class Layer(nn.Module):
        def __init__(self, d: int = 768, heads: int = 12, ff: int = 3072) -> None:
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.f1, self.f2 = nn.Linear(d, ff), nn.Linear(ff, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            b, n, d = x.shape

            def split(t):
                return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 8.0, -1)
            ctx = torch.matmul(att, v).transpose(1, 2).reshape(b, n, d)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.f2(torch.nn.functional.gelu(self.f1(x))))

    torch.manual_seed(0)
    tasks = _torch_tasks(tvm, Layer(), torch.randn(1, 128, 768))
    nests = {name: analyze(mod) for name, mod in tasks.items()}
    found = {(n.family, n.extents) for n in nests.values()}
    assert ("matmul", (128, 768, 768)) in found
    assert ("matmul", (128, 3072, 768)) in found
    assert ("matmul", (128, 768, 3072)) in found
    assert ("batch_matmul", (12, 128, 128, 64)) in found  # q @ k^T
    assert ("batch_matmul", (12, 128, 64, 128)) in found  # att @ v
    assert any(n.family == "other" for n in nests.values())  # softmax, layer norm, ...

    dense = {n.extents: name for name, n in nests.items() if n.family == "matmul"}
    sigs = {e: sketch_signature(tasks[name], TARGET) for e, name in dense.items()}
    assert len(set(sigs.values())) == 1  # all Linear layers: one sketch set
    big, small = nests[dense[(128, 3072, 768)]], nests[dense[(128, 768, 768)]]
    s = sigs[(128, 768, 768)]
    assert can_reuse(big, small, s, s).reason == "a dominates b"
    bmm = [name for name, n in nests.items() if n.family == "batch_matmul"]
    assert sketch_signature(tasks[bmm[0]], TARGET) != s


@pytest.mark.tvm
def test_design_spaces_of_tasks_that_differ_only_in_block_names_are_their_own(tvm) -> None:
    """Structural hashing and equality ignore block names, but traces name blocks: a memoized
    space of a TE-built ``c`` must not be handed to the same matmul whose block is ``matmul_out``
    (its replay would fail: a bridge and a Relax task name their blocks differently)."""
    from tvm import te

    from tunecache.tvm_layer.sketch import design_space_json

    def matmul(block: str):
        a, b = te.placeholder((64, 32), name="a"), te.placeholder((32, 48), name="b")
        r = te.reduce_axis((0, 32), name="r")
        c = te.compute((64, 48), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name=block)
        return tvm.IRModule({"main": te.create_prim_func([a, b, c])})

    def block_names(traces) -> set[str]:
        return {inst[2][0] for insts, _ in traces for inst in insts if inst[0] == "GetSBlock"}

    assert "c" in block_names(design_space_json(matmul("c"), TARGET))
    named = block_names(design_space_json(matmul("matmul_out"), TARGET))
    assert "matmul_out" in named and "c" not in named
