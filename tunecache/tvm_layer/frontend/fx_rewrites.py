"""PyTorch semantics that TVM's importer lacks, given to an exported FX graph before import.

:func:`give_torch_semantics` rewrites a decomposed ``torch.export`` graph (core ATen operators)
in place, so that TVM's ``from_exported_program`` computes what PyTorch computes where the two
disagree. Each rule is general, not per model, and returns a note for the report:

* ``aten.cat`` skips empty 1-D operands (PyTorch's legacy rule: a ``torch.Size([0])`` tensor
  concatenates with tensors of any rank); TVM's ``concat`` rejects operands of another rank.
  transformers' ``DynamicCache`` starts every layer's keys and values as such a placeholder, so
  every decoder LM with ``use_cache=True`` hit it: the operands are dropped.
* ``cumsum``, ``cumprod``, ``sum`` and ``prod`` of bool or small integer tensors compute in
  ``int64`` in PyTorch (without a ``dtype``); TVM's importer keeps the input's type (a bool
  ``cumsum``, as transformers' masks compute position ids, then fails LLVM's codegen): the input
  is cast to the output's type first.
* ``aten.index.Tensor`` wraps negative indices (``x[..., [-1], :]``, as Falcon splits its fused
  keys and values); TVM's ``take`` reads out of bounds (a wrong result, no error): integer
  index tensors are mapped to ``i + size`` where negative (folded away for constant indices).
"""

from __future__ import annotations

from typing import Any

__all__ = ["give_torch_semantics"]


def _is_empty_1d(arg: Any) -> bool:
    val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    shape = getattr(val, "shape", None)
    return shape is not None and len(shape) == 1 and shape[0] == 0


def _cat_skips_empty_1d(graph: Any) -> int:
    """Drop the empty 1-D operands of every ``aten.cat``; return how many ``cat`` s changed."""
    import torch

    cat = torch.ops.aten.cat.default
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not cat or not node.args:
            continue
        tensors = list(node.args[0])
        keep = [t for t in tensors if not _is_empty_1d(t)]
        if len(keep) == len(tensors) or not keep:  # nothing to drop, or all empty: TVM handles [0]
            continue
        changed += 1
        if len(keep) == 1:
            node.replace_all_uses_with(keep[0])
            graph.erase_node(node)
        else:
            node.args = (keep, *node.args[1:])
    return changed


def _dtype(arg: Any) -> Any:
    val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    return getattr(val, "dtype", None)


def _reductions_promote(graph: Any) -> int:
    """Cast the input of ``cumsum``/``cumprod``/``sum``/``prod`` to its output's dtype where
    PyTorch promoted it; return how many were cast."""
    import torch

    aten = torch.ops.aten
    ops = {aten.cumsum.default, aten.cumprod.default, aten.sum.default, aten.sum.dim_IntList, aten.prod.default,
           aten.prod.dim_int}
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in ops or not node.args:
            continue
        src, out = _dtype(node.args[0]), _dtype(node)
        if src is None or out is None or src == out:
            continue
        with graph.inserting_before(node):
            cast = graph.call_function(aten._to_copy.default, (node.args[0],), {"dtype": out})
        cast.meta["val"] = node.args[0].meta["val"].to(out)
        node.args = (cast, *node.args[1:])
        changed += 1
    return changed


def _index_wraps_negative(graph: Any) -> int:
    """Map negative integer indices of every ``aten.index.Tensor`` to ``i + size``; return how
    many indices were mapped."""
    import torch

    aten = torch.ops.aten
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.index.Tensor or len(node.args) < 2:
            continue
        data_val = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
        if data_val is None:
            continue
        indices = list(node.args[1])
        for axis, idx in enumerate(indices):
            dtype = _dtype(idx)
            if dtype is None or dtype == torch.bool or dtype.is_floating_point:
                continue
            size = data_val.shape[axis]
            if not isinstance(size, int):  # a symbolic dimension: leave it to TVM
                continue
            val = idx.meta["val"]
            with graph.inserting_before(node):
                negative = graph.call_function(aten.lt.Scalar, (idx, 0))
                negative.meta["val"] = val < 0
                shifted = graph.call_function(aten.add.Tensor, (idx, size))
                shifted.meta["val"] = val + size
                wrapped = graph.call_function(aten.where.self, (negative, shifted, idx))
                wrapped.meta["val"] = torch.where(val < 0, val + size, val)
            indices[axis] = wrapped
            changed += 1
        node.args = (node.args[0], indices, *node.args[2:])
    return changed


def give_torch_semantics(graph_module: Any) -> list[str]:
    """Rewrite ``graph_module`` (a decomposed ``torch.export`` graph) in place where TVM's importer
    would compute something else than PyTorch, or refuse; return one note per rule applied.

    Parameters
    ----------
    graph_module
        The ``torch.fx.GraphModule`` of an ``ExportedProgram`` after ``run_decompositions``.

    Returns
    -------
    list of str
        What was changed, for the compile report (empty when nothing was).
    """
    graph = graph_module.graph
    notes = []
    n = _cat_skips_empty_1d(graph)
    if n:
        notes.append(f"import: dropped empty 1-D operands of {n} torch.cat call(s) (PyTorch skips them; "
                     "e.g. transformers' DynamicCache placeholders)")
    n = _reductions_promote(graph)
    if n:
        notes.append(f"import: {n} cumsum/cumprod/sum/prod call(s) computed in their output's type "
                     "(PyTorch promotes bool and small integer inputs to int64)")
    n = _index_wraps_negative(graph)
    if n:
        notes.append(f"import: {n} tensor index(es) wrapped where negative (PyTorch's indexing; TVM's take "
                     "does not wrap)")
    if notes:
        graph.eliminate_dead_code()
        graph_module.recompile()
    return notes
