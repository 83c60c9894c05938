"""Reuse-index entries: a planned task as the store indexes it, and back.

The store keeps one :class:`~tunecache.store.values.ReuseEntry` per (workload, target): the
task's loop nest and decision signature, its reuse group and its size. The planner asks the
store for the entries of a task's group nearest its size
(:meth:`~tunecache.store.BaseStore.reuse_candidates`) and turns them back into
:class:`~tunecache.reuse.planner.PlanTask` values here, so choosing sources decodes no stored
workload. Pure functions, no TVM.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from tunecache.reuse.loopnest import LoopNest
from tunecache.reuse.planner import PlanTask
from tunecache.store.keys import canonical_json
from tunecache.store.values import ReuseEntry

__all__ = ["UNREADABLE_GROUP", "entry_of", "group_of", "log_work", "nest_from_json", "nest_to_json", "task_of"]

#: Group of an entry written for a stored workload that could not be decoded or analysed: it
#: marks the workload as seen, so it is not decoded again, and it is never anyone's source.
UNREADABLE_GROUP = "unreadable"


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def nest_to_json(nest: LoopNest) -> str:
    """Return ``nest`` as canonical JSON (:func:`nest_from_json` reads it back)."""
    return canonical_json({
        "family": nest.family, "space": nest.space, "reduction": nest.reduction, "dtype": nest.dtype,
        "anchor": nest.anchor, "signature": nest.signature, "layout": nest.layout, "roles": nest.roles,
        "iter_extents": nest.iter_extents, "params": nest.params, "epilogue": nest.epilogue,
    })


def nest_from_json(text: str) -> LoopNest:
    """Return the :class:`LoopNest` :func:`nest_to_json` wrote.

    Raises
    ------
    ValueError
        If ``text`` is not such JSON (the store treats it as opaque text).

    Examples
    --------
    >>> n = LoopNest("matmul", (128, 768), (768,), "float32", "T_matmul", "s", "MK/KN", ("M", "N", "K"),
    ...              (128, 768, 768), (("out_dtype", "float32"),))
    >>> nest_from_json(nest_to_json(n)) == n
    True
    """
    d = json.loads(text)
    if not isinstance(d, dict):
        raise ValueError("a loop nest must be a JSON object")
    return LoopNest(
        family=str(d["family"]), space=_tuples(d["space"]), reduction=_tuples(d["reduction"]),
        dtype=str(d["dtype"]), anchor=str(d.get("anchor", "")), signature=str(d["signature"]),
        layout=str(d.get("layout", "")), roles=_tuples(d.get("roles", [])),
        iter_extents=_tuples(d.get("iter_extents", [])), params=_tuples(d.get("params", [])),
        epilogue=_tuples(d.get("epilogue", [])),
    )


def group_of(nest: LoopNest, sketch: str) -> str:
    """Return the reuse group: a digest of everything two reuse partners must share.

    :func:`tunecache.reuse.conditions.can_reuse` rejects a pair that differs in family, dtype,
    layout, structure, decision signature or rank; those are hashed here, so a pair in one group
    differs at most in its extents.
    """
    text = canonical_json([nest.family, nest.dtype, nest.layout, nest.signature, sketch, len(nest.extents)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def log_work(nest: LoopNest) -> float:
    """Return log2 of the loop nest's iteration-space size (0 for an empty nest)."""
    return math.log2(max(nest.work, 1))


def entry_of(task: PlanTask, target_id: str) -> ReuseEntry:
    """Return the index entry of a described task, for the target ``target_id``."""
    return ReuseEntry(
        workload=task.key, target_id=target_id, name=task.name, family=task.nest.family,
        group=group_of(task.nest, task.sketch), log_work=log_work(task.nest),
        nest_json=nest_to_json(task.nest), sketch=task.sketch, trivial=task.trivial,
    )


def task_of(entry: ReuseEntry) -> PlanTask | None:
    """Return the planner's view of an entry (weight 0), ``None`` for an unreadable one."""
    if entry.group == UNREADABLE_GROUP:
        return None
    try:
        nest = nest_from_json(entry.nest_json)
    except (ValueError, KeyError, TypeError):
        return None
    return PlanTask(entry.workload, entry.name or entry.workload.shash[:8], 0.0, nest, entry.sketch, entry.trivial)
