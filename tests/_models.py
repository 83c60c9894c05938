"""Small models shared by tests (built by hand, no downloads)."""

from __future__ import annotations

import numpy as np


def onnx_cnn(batch: int | str = 1, extra_node: str | None = None):
    """Conv(3->8, 3x3, pad 1) + Relu + Flatten + Gemm(512->10), built by hand with onnx.helper."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3,
        "B": rng.standard_normal(8).astype("float32"),
        "G": rng.standard_normal((10, 8 * 8 * 8)).astype("float32") * 0.05,
        "GB": rng.standard_normal(10).astype("float32"),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "G", "GB"], ["y"], transB=1),
    ]
    out = "y"
    if extra_node is not None:
        nodes.append(helper.make_node(extra_node, ["y"], ["z"]))
        out = "z"
    graph = helper.make_graph(
        nodes,
        "small_onnx_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])




def relax_matmul_relu(m: int, k: int, n: int):
    """A Relax IRModule computing relu(x @ w) for x: (m, k), w: (k, n)."""
    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm()
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((m, k), "float32"), w: R.Tensor((k, n), "float32")) -> R.Tensor((m, n), "float32"):
            with R.dataflow():
                y = R.nn.relu(R.matmul(x, w))
                R.output(y)
            return y

    return Mod


def relax_softmax(rows: int, n: int):
    """A Relax IRModule computing softmax(x) over the last axis of x: (rows, n)."""
    from tunecache.tvm_layer import load_tvm

    load_tvm()
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((rows, n), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.softmax(x, axis=-1))
        bb.emit_func_output(y)
    return bb.get()


def te_conv(tvm, shape, kernel, k, pad=0, stride=1, layout="NCHW"):
    from tvm import te, topi

    if layout == "NCHW":
        x = te.placeholder(shape, name="x")
        w = te.placeholder((k, shape[1], kernel, kernel), name="w")
        y = topi.nn.conv2d_nchw(x, w, stride, pad, 1)
    else:
        x = te.placeholder(shape, name="x")
        w = te.placeholder((kernel, kernel, shape[3], k), name="w")
        y = topi.nn.conv2d_nhwc(x, w, stride, pad, 1)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def te_matmul(tvm, m, n, k):
    from tvm import te

    a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})
