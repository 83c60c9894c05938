"""Static shapes given to an ONNX graph before import, where its inputs' shapes fix them.

Exporters write shape arithmetic into the graph (``Shape`` -> ``Gather`` -> ``Concat`` ->
``Reshape``; ``ConstantOfShape``; padding computed from sizes), because the graph may be run at
other shapes. tunecache compiles for one static shape, and TVM's ONNX importer rejects much of
that arithmetic when it is not constant ("Dynamic pads are not supported yet", "Slice requires a
statically known input rank", a ``ConstantOfShape`` of rank 0). :func:`fold_static_shapes`
computes it once with ONNX's own shape inference and reference evaluator, and replaces it by
constants: the graph TVM imports computes the same values at that shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["fold_static_shapes", "FOLD_MAX_ELEMENTS"]

#: Largest output (in elements) a node folded to a constant may have: shape arithmetic and masks
#: of a sequence's length are small; a weight's re-layout is left to TVM's own ``FoldConstant``.
FOLD_MAX_ELEMENTS = 1 << 16

# Operators whose output is not a function of their inputs.
_NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                               "Multinomial", "Bernoulli", "Dropout"})


def _static_dims(type_proto: Any) -> tuple[int, ...] | None:
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = []
    for d in tensor.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _set_input_shapes(graph: Any, shapes: Mapping[str, Sequence[int]]) -> None:
    for inp in graph.input:
        if inp.name not in shapes:
            continue
        dims = inp.type.tensor_type.shape.dim
        del dims[:]
        for v in shapes[inp.name]:
            dims.add().dim_value = int(v)


def _evaluate(node: Any, inputs: list[Any], opsets: dict[str, int]) -> list[Any] | None:
    """Run one node with ONNX's reference evaluator; ``None`` where it cannot."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    ins = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(node.input, inputs, strict=True) if n]
    outs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = onnx.helper.make_graph([node], "fold", ins, outs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
    try:
        results = ReferenceEvaluator(model).run(None, {n: v for n, v in zip(node.input, inputs, strict=True) if n})
    except (NotImplementedError, RuntimeError, ValueError, TypeError, KeyError, IndexError):
        return None  # the reference evaluator lacks some operators and attributes: the node stays for TVM
    return list(results)


def fold_static_shapes(model: Any, shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[Any, int]:
    """Replace the shape arithmetic of an ONNX graph by constants, for static input shapes.

    Parameters
    ----------
    model
        An ``onnx.ModelProto`` (not changed: a copy is returned).
    shapes
        Static shapes of graph inputs whose declared shape is symbolic (from ``example_inputs``).

    Returns
    -------
    tuple of (onnx.ModelProto, int)
        The graph with every ``Shape``/``Size`` of a statically shaped tensor, and every node
        whose inputs are all constants (and whose outputs have at most
        :data:`FOLD_MAX_ELEMENTS` elements), replaced by initializers; and how many nodes were
        folded. A graph ONNX's shape inference rejects is returned as it is, with 0.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper, shape_inference

    m = onnx.ModelProto()
    m.CopyFrom(model)
    _set_input_shapes(m.graph, shapes or {})
    try:
        inferred = shape_inference.infer_shapes(m, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return model, 0
    static: dict[str, tuple[int, ...]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = _static_dims(vi.type)
        if dims is not None:
            static[vi.name] = dims
    consts: dict[str, Any] = {init.name: numpy_helper.to_array(init) for init in m.graph.initializer}
    opsets = {o.domain or "": o.version for o in m.opset_import}
    outputs = {o.name for o in m.graph.output}
    kept, folded = [], 0
    for node in m.graph.node:
        values: list[Any] | None = None
        if any(o in outputs for o in node.output) or node.domain not in ("", "ai.onnx"):
            pass
        elif node.op_type in ("Shape", "Size") and node.input[0] in static:
            sizes = np.array(static[node.input[0]], dtype=np.int64)
            if node.op_type == "Size":
                values = [np.array(int(sizes.prod()), dtype=np.int64)]
            else:
                attrs = {a.name: a.i for a in node.attribute}
                values = [sizes[attrs.get("start", 0): attrs.get("end", len(sizes))]]
        elif (node.op_type not in _NONDETERMINISTIC and all(not i or i in consts for i in node.input)
              and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
              and not any(o in static and int(np.prod(static[o], dtype=np.int64)) > FOLD_MAX_ELEMENTS
                          for o in node.output)):  # a weight's re-layout: left to TVM, not evaluated here
            values = _evaluate(node, [consts[i] if i else None for i in node.input], opsets)
            if node.op_type == "Constant" and values is not None:  # TVM reads constants itself
                consts.update({o: v for o, v in zip(node.output, values, strict=False) if o})
                values = None
        if values is None or any(np.asarray(v).size > FOLD_MAX_ELEMENTS for v in values):
            kept.append(node)
            continue
        for name, v in zip(node.output, values, strict=False):
            if name:
                arr = np.asarray(v)
                consts[name] = arr
                m.graph.initializer.append(numpy_helper.from_array(arr, name))
        folded += 1
    if not folded:
        return model, 0
    del m.graph.node[:]
    m.graph.node.extend(kept)
    return m, folded
