"""Where the gradient search's cost model comes from: the store's records, and the shipped model.

:func:`store_rows` turns the measured records of a hardware key into training rows (features of
each record's sketch and decisions, ``log(seconds / work)``); :func:`start_model` is the model a
search starts from: the shipped one (``models/``, trained by ``tools/train_gradient_model.py`` on
random programs of shapes no benchmark task has), refitted on the store's rows when the store has
any. Records whose trace does not decode, whose workload the store does not hold, or whose sketch
has no multi-level tiling are skipped.
"""

from __future__ import annotations

import math
from importlib import resources
from typing import Any

import numpy as np

from tunecache.errors import InvalidRecordError
from tunecache.search.gradient.model import CostModel
from tunecache.search.gradient.space import N_FEATURES, tiled_space

__all__ = ["SHIPPED_MODEL", "shipped_model", "start_model", "store_rows"]

#: The shipped model's file inside the package.
SHIPPED_MODEL = "models/default.json"
#: Records read from the store for training at most (the newest first).
STORE_ROWS = 4000


def shipped_model() -> CostModel | None:
    """The model that ships with the package, or ``None`` if it is missing or for other features."""
    try:
        text = resources.files("tunecache.search.gradient").joinpath(SHIPPED_MODEL).read_text()
    except (FileNotFoundError, OSError):
        return None
    import json

    try:
        return CostModel.from_json(json.loads(text))
    except (ValueError, InvalidRecordError):
        return None


def store_rows(store: Any, hardware: Any, *, limit: int = STORE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Training rows of the newest ``limit`` valid records of ``hardware`` in ``store``.

    Returns
    -------
    tuple of numpy.ndarray
        ``(features, targets)``: ``(n, N_FEATURES)`` and ``(n,)``.
    """
    from tunecache.search.narrow.align import Skeleton
    from tunecache.tvm_layer.convert import workload_from_json

    mods: dict[Any, Any] = {}
    reads: dict[Any, Any] = {}
    xs: list[np.ndarray] = []
    ys: list[float] = []
    for rec in store.iter_records(hardware=hardware, valid_only=True, newest_first=True):
        if len(xs) >= limit:
            break
        if rec.latency_s is None or rec.latency_s <= 0:
            continue
        if rec.workload not in mods:
            stored = store.get_workload(rec.workload)
            try:
                mods[rec.workload] = workload_from_json(rec.workload, stored.mod_json).mod if stored else None
            except Exception:  # noqa: BLE001 - a workload TVM cannot read is no training data
                mods[rec.workload] = None
        mod = mods[rec.workload]
        if mod is None:
            continue
        try:
            sk = Skeleton(0, rec.trace)
            space = tiled_space(sk, mod, reads)
        except Exception:  # noqa: BLE001 - an unreadable trace is skipped
            continue
        if space is None or not all(ax.site in sk.decisions for ax in space.axes):
            continue
        xs.append(space.feature_values(sk.decisions))
        ys.append(math.log(rec.latency_s) - space.work)
    if not xs:
        return np.zeros((0, N_FEATURES)), np.zeros(0)
    return np.array(xs), np.array(ys)


def start_model(store: Any = None, hardware: Any = None, *,
                seed: int = 0) -> tuple[CostModel, tuple[np.ndarray, np.ndarray]]:
    """The model a search starts from, and the store's rows it keeps refitting on.

    The shipped model (a fresh one if none ships), refitted on the store's rows for ``hardware``
    when there are any.
    """
    model = shipped_model() or CostModel(seed)
    rows = store_rows(store, hardware) if store is not None and hardware is not None else (
        np.zeros((0, N_FEATURES)), np.zeros(0))
    if len(rows[0]):
        model.fit(rows[0], rows[1], epochs=60 if model.trained_on else 200, rescale=not model.trained_on,
                  seed=seed)
    return model, rows
