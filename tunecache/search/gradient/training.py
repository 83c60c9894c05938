"""Where the gradient search's cost model comes from: the store's records, and the shipped model.

:func:`read_store` turns the measured records of a hardware key into training rows (features of
each record's sketch and decisions, ``log(seconds / work)``) and stored neighbours to start from
(the best tiling of each workload's sketch); :func:`start_model` is the model a
search starts from: the shipped one (``models/``, trained by ``tools/train_gradient_model.py`` on
random programs of shapes no benchmark task has), refitted on the store's rows when the store has
any. Records whose trace does not decode, whose workload the store does not hold, or whose sketch
has no multi-level tiling are skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from tunecache.errors import InvalidRecordError
from tunecache.search.gradient.model import CostModel
from tunecache.search.gradient.space import FEATURE_VERSION, N_FEATURES, TiledSpace, tiled_space
from tunecache.search.gradient.starts import Tiling, best_tilings, tiling_of

__all__ = ["MIN_STORE_ROWS", "SHIPPED_MODEL", "SHIPPED_ROWS", "StoreSample", "read_store", "shipped_model",
           "shipped_rows", "start_model", "store_rows", "trace_row", "trace_tiling"]

#: The shipped model's file inside the package.
SHIPPED_MODEL = "models/default.json"
#: A sample of the rows the shipped model was trained on (48 per training workload).
SHIPPED_ROWS = "models/rows.json"
#: Records read from the store for training at most (the newest first).
STORE_ROWS = 4000
#: Workloads whose records are read at most (the newest first): each costs decoding its module
#: and reading its block with a TVM ``Schedule``, a store of a team's size holds thousands.
STORE_WORKLOADS = 128
#: A workload's records that give no training row (an untiled program: elementwise, layer norm)
#: before the rest of its records are skipped unread by the model.
UNTILED_RECORDS = 4
#: Workloads whose programs sample tiles but gave no row, decoded at most in one read.
UNTILED_WORKLOADS = 32
#: Below this many store rows, the shipped rows are refitted on beside them: a model refitted on a
#: task's own 16-32 measurements alone stalled on an empty store (docs/gradient.md).
MIN_STORE_ROWS = 256


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


def shipped_rows() -> tuple[np.ndarray, np.ndarray]:
    """The sample of the shipped model's training rows (empty if missing or for other features)."""
    import json

    empty = (np.zeros((0, N_FEATURES)), np.zeros(0))
    try:
        doc = json.loads(resources.files("tunecache.search.gradient").joinpath(SHIPPED_ROWS).read_text())
        x, y = np.asarray(doc["features"], dtype=float), np.asarray(doc["targets"], dtype=float)
    except (FileNotFoundError, OSError, ValueError, KeyError, TypeError):
        return empty
    if doc.get("feature_version") != FEATURE_VERSION or x.ndim != 2 or x.shape[1] != N_FEATURES or len(x) != len(y):
        return empty
    return x, y


def _trace_space(trace: Any, mod: Any, reads_cache: dict[Any, Any] | None, *,
                 spaces: dict[Any, TiledSpace | None] | None = None) -> tuple[Any, TiledSpace] | None:
    """The skeleton and tiled space of a measured trace of ``mod`` (``None``: unreadable, untiled).

    With ``spaces``, ``trace`` is a stored record's (plain: not walked again, see
    :class:`~tunecache.search.narrow.align.Skeleton`) and the spaces are kept per module and
    sketch: every record of one workload's search shares its sketches, and a space depends on
    the trace's structure and the loop extents only, not on its tile sizes (checked).
    """
    from tunecache.search.narrow.align import Skeleton

    try:
        sk = Skeleton(0, trace, plain=spaces is not None)
        key = (id(mod), sk.digest)
        if spaces is not None and key in spaces and _same_extents(spaces[key], sk.decisions):
            space = spaces[key]
        else:
            space = tiled_space(sk, mod, reads_cache)
            if spaces is not None:
                spaces[key] = space
    except Exception:  # noqa: BLE001 - an unreadable trace is no training data
        return None
    if space is None or not all(ax.site in sk.decisions for ax in space.axes):
        return None
    return sk, space


def _same_extents(space: TiledSpace | None, decisions: dict[int, Any]) -> bool:
    """Whether ``decisions`` tile each of ``space``'s axes to its extent (a kept space fits them)."""
    if space is None:
        return True
    try:
        return all(math.prod(int(t) for t in decisions[ax.site]) == ax.extent for ax in space.axes)
    except (KeyError, TypeError, ValueError):
        return False


def trace_row(trace: Any, latency_s: float, mod: Any,
              reads_cache: dict[Any, Any] | None = None) -> tuple[np.ndarray, float] | None:
    """One training row of a measured trace of ``mod``: ``(features, log(seconds / work))``, or
    ``None`` when the trace does not decode or its sketch has no multi-level tiling."""
    got = _trace_space(trace, mod, reads_cache) if latency_s > 0 else None
    if got is None:
        return None
    sk, space = got
    return space.feature_values(sk.decisions), math.log(latency_s) - space.work


def trace_tiling(trace: Any, latency_s: float, mod: Any, reads_cache: dict[Any, Any] | None = None) -> Tiling | None:
    """The :class:`~tunecache.search.gradient.starts.Tiling` of a measured trace of ``mod``
    (``None`` as for :func:`trace_row`)."""
    got = _trace_space(trace, mod, reads_cache) if latency_s > 0 else None
    return None if got is None else tiling_of(got[1], got[0].decisions, latency_s)


@dataclass(frozen=True)
class StoreSample:
    """What the gradient search reads from a store for one hardware key.

    Attributes
    ----------
    rows
        ``(features, targets)`` of the newest valid records (:func:`trace_row`).
    tilings
        The best record's :class:`~tunecache.search.gradient.starts.Tiling` of each workload and
        sketch among them: stored neighbours to start from.
    """

    rows: tuple[np.ndarray, np.ndarray]
    tilings: tuple[Tiling, ...]


def read_store(store: Any, hardware: Any, *, limit: int = STORE_ROWS,
               workloads: int = STORE_WORKLOADS, per_workload: int | None = None) -> StoreSample:
    """Training rows and stored neighbours from the newest valid records of ``hardware``.

    Parameters
    ----------
    store, hardware
        The store, and the hardware key whose records are read.
    limit
        Rows at most (and at most ``4 * limit`` records scanned, newest first).
    workloads
        Workloads with tiled programs the rows come from at most, the newest first: workloads
        whose records give no row (untiled programs) do not count, and at most
        :data:`UNTILED_RECORDS` of each such workload's records are read.
    per_workload
        Records one workload gives at most (``None``: no cap): a sample of many workloads rather
        than the newest few's whole searches, which the store picks
        (:meth:`~tunecache.store.contract.BaseStore.sample_records`) without decoding the rest.

    Returns
    -------
    StoreSample
    """
    from tunecache.gcpause import gc_paused

    with gc_paused():  # thousands of decoded traces and features: nothing cyclic (tunecache.gcpause)
        return _read_store(store, hardware, limit, workloads, per_workload)


def _read_store(store: Any, hardware: Any, limit: int, workloads: int, per_workload: int | None) -> StoreSample:
    from tunecache.tvm_layer.convert import workload_from_json

    mods: dict[Any, Any] = {}
    reads: dict[Any, Any] = {}
    spaces: dict[Any, TiledSpace | None] = {}
    xs: list[np.ndarray] = []
    ys: list[float] = []
    keyed: list[tuple[Any, Tiling]] = []
    # Only workloads that give rows count towards ``workloads``: a zoo store's newest 32 held 94
    # rows in all (BERT's elementwise, layer-norm and reused tasks), and the replay's second
    # opinion, which needs MODEL_MIN_ROWS, never ran (session 33). A trace that samples no tile
    # costs no module decoding; a workload whose UNTILED_RECORDS records gave no row is skipped
    # after; and at most UNTILED_WORKLOADS workloads without rows are decoded.
    taken: dict[Any, int] = {}  # rows per workload: those in it are the workloads that count
    misses: dict[Any, int] = {}
    # A capped sample comes from the store's own query: on a zoo store it decodes 586 of 1,743
    # records (the rest were decoded only to be skipped: read_store 0.87-0.97 s, was 1.07-1.10 s;
    # session 35).
    recs = (store.iter_records(hardware=hardware, valid_only=True, newest_first=True) if per_workload is None
            else store.sample_records(hardware, newest=4 * limit, per_workload=per_workload))
    for scanned, rec in enumerate(recs):
        if len(xs) >= limit or scanned >= 4 * limit:  # a store of millions is never read whole
            break
        if rec.latency_s is None or rec.latency_s <= 0:
            continue
        w = rec.workload
        if w not in taken and (len(taken) >= workloads or misses.get(w, 0) >= UNTILED_RECORDS):
            continue
        if per_workload is not None and taken.get(w, 0) >= per_workload:
            continue
        if not any(inst[0] == "SamplePerfectTile" for inst in rec.trace[0]):
            misses[w] = misses.get(w, 0) + 1
            continue
        if w not in mods:
            if len(mods) - len(taken) >= UNTILED_WORKLOADS:
                continue
            stored = store.get_workload(w)
            try:
                mods[w] = workload_from_json(w, stored.mod_json).mod if stored else None
            except Exception:  # noqa: BLE001 - a workload TVM cannot read is no training data
                mods[w] = None
        mod = mods[w]
        got = None if mod is None else _trace_space(rec.trace, mod, reads, spaces=spaces)
        if got is None:
            misses[w] = UNTILED_RECORDS if mod is None else misses.get(w, 0) + 1
            continue
        taken[w] = taken.get(w, 0) + 1
        sk, space = got
        xs.append(space.feature_values(sk.decisions))
        ys.append(math.log(rec.latency_s) - space.work)
        tiling = tiling_of(space, sk.decisions, rec.latency_s)
        if tiling is not None:
            keyed.append(((w, sk.digest), tiling))
    rows = (np.array(xs), np.array(ys)) if xs else (np.zeros((0, N_FEATURES)), np.zeros(0))
    return StoreSample(rows, best_tilings(keyed))


def store_rows(store: Any, hardware: Any, *, limit: int = STORE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Training rows (:func:`trace_row`) of the newest ``limit`` valid records of ``hardware``.

    Returns
    -------
    tuple of numpy.ndarray
        ``(features, targets)``: ``(n, N_FEATURES)`` and ``(n,)``.
    """
    return read_store(store, hardware, limit=limit).rows


def start_model(store: Any = None, hardware: Any = None, *, rows: tuple[np.ndarray, np.ndarray] | None = None,
                seed: int = 0) -> tuple[CostModel, tuple[np.ndarray, np.ndarray]]:
    """The model a search starts from, and the rows it keeps refitting on beside the task's own.

    The shipped model (a fresh one if none ships), refitted on the store's rows for ``hardware``
    (or ``rows``, when given) when there are any; with fewer than :data:`MIN_STORE_ROWS` of them
    the shipped rows are added.
    """
    model = shipped_model() or CostModel(seed)
    if rows is None:
        rows = store_rows(store, hardware) if store is not None and hardware is not None else (
            np.zeros((0, N_FEATURES)), np.zeros(0))
    own = len(rows[0])
    if own < MIN_STORE_ROWS:
        extra = shipped_rows()
        rows = (np.vstack([rows[0], extra[0]]), np.concatenate([rows[1], extra[1]]))
    if own:
        model.fit(rows[0], rows[1], epochs=60 if model.trained_on else 200, rescale=not model.trained_on,
                  seed=seed)
    return model, rows
