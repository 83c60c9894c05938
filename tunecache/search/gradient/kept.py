"""The store's cost model: fitted once on a hardware key's records, kept in the store for every reader.

Fitting the model on a store means reading a sample of its records (1,000 rows of a zoo store:
decoding their traces and computing their features) and refitting the shipped model on them.
A compile with ``tune="never"`` asks it about every replayed matmul and convolution
(:func:`tunecache.replay.second_opinion`), and on BERT at 64 tokens it took 3.6-4.1 of the replay
compile's 17 s against an untuned build's 10 s (AMD EPYC Zen 3, session 37). The records change
only when someone tunes, so whoever fits it keeps it in the store
(:meth:`~tunecache.store.contract.BaseStore.put_derived`, JSON), and the next reader takes it
while the hardware key holds no more than :data:`REFIT_GROWTH` times the records it was fitted
beside. ``tunecache warm`` fits it at its end, so a team's first replay compile reads it too.

What is kept is JSON, read as untrusted input like a record: a document that does not decode, is
for other features or another hardware key, or was fitted on fewer rows than the reader needs is
fitted again (and replaced, where the store may be written).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from tunecache.errors import InvalidRecordError, StoreError
from tunecache.search.gradient import training
from tunecache.search.gradient.model import CostModel
from tunecache.search.gradient.space import FEATURE_VERSION

__all__ = ["REFIT_GROWTH", "KeptModel", "TooFewRows", "derived_name", "describe_kept", "fit_and_keep", "store_model"]

log = logging.getLogger("tunecache")

#: The kept document's format.
KEPT_FORMAT = 1
#: A kept model serves until the hardware key holds more than this many times the records it
#: was fitted beside (then it is fitted again on a fresh sample, and replaced).
REFIT_GROWTH = 1.25


class TooFewRows(Exception):
    """The store gave fewer training rows than asked for (``rows`` of ``needed``)."""

    def __init__(self, rows: int, needed: int) -> None:
        super().__init__(f"the store gave {rows} rows of tiled programs, {needed} are needed")
        self.rows = rows
        self.needed = needed


@dataclass(frozen=True)
class KeptModel:
    """A cost model fitted on a store's records.

    Attributes
    ----------
    model
        The model.
    rows
        Training rows it was fitted on.
    records
        The hardware key's records (:meth:`~tunecache.store.contract.BaseStore.count_records`)
        when it was fitted.
    how
        ``"kept"``: read from the store; ``"fitted"``: fitted now.
    """

    model: CostModel
    rows: int
    records: int
    how: str


def derived_name(hardware: Any) -> str:
    """The name the model of ``hardware`` is kept under (``cost_model/`` + its id)."""
    return f"cost_model/{hardware.id}"


def store_model(store: Any, hardware: Any, *, limit: int, workloads: int, per_workload: int,
                min_rows: int) -> KeptModel:
    """The cost model fitted on ``store``'s records of ``hardware``: the kept one while it is
    fresh, else one fitted now on a sample of them (and kept, where the store may be written).

    Parameters
    ----------
    store, hardware
        The store and the hardware key.
    limit, workloads, per_workload
        The sample a model is fitted on (:func:`tunecache.search.gradient.training.read_store`).
    min_rows
        Training rows a model needs: a kept one fitted on fewer is fitted again.

    Returns
    -------
    KeptModel

    Raises
    ------
    TooFewRows
        If the sample has fewer than ``min_rows`` rows.
    """
    now = store.count_records(hardware)
    kept = _read_kept(store, hardware, now, min_rows)
    if kept is not None:
        return kept
    return fit_and_keep(store, hardware, limit=limit, workloads=workloads, per_workload=per_workload,
                        min_rows=min_rows, records=now)


def fit_and_keep(store: Any, hardware: Any, *, limit: int, workloads: int, per_workload: int, min_rows: int,
                 records: int | None = None) -> KeptModel:
    """Fit the model on a sample of ``store``'s records of ``hardware`` and keep it there.

    A store that may not be written keeps nothing (logged); the model is returned all the same.
    Parameters as for :func:`store_model`; ``records`` is the hardware key's record count now
    (counted when not given).

    Raises
    ------
    TooFewRows
        If the sample has fewer than ``min_rows`` rows.
    """
    if records is None:
        records = store.count_records(hardware)
    rows = training.read_store(store, hardware, limit=limit, workloads=workloads, per_workload=per_workload).rows
    if len(rows[0]) < min_rows:
        raise TooFewRows(len(rows[0]), min_rows)
    model = training.start_model(rows=rows)[0]
    doc = {"format": KEPT_FORMAT, "hardware": hardware.id, "feature_version": FEATURE_VERSION,
           "rows": len(rows[0]), "records": records, "fitted_at": time.time(), "model": model.to_json()}
    try:
        store.put_derived(derived_name(hardware), json.dumps(doc))
    except StoreError as err:  # a read-only store among them: the next reader fits it again
        log.info("tunecache: the store's cost model was not kept: %s", err)
    return KeptModel(model, len(rows[0]), records, "fitted")


def describe_kept(store: Any, hardware: Any, records: int | None = None) -> dict[str, Any] | None:
    """What ``store`` keeps for ``hardware`` (``tunecache db stats``), without decoding the model.

    ``records`` is the key's record count (failed and stale ones included, as
    :meth:`~tunecache.store.contract.BaseStore.count_records` counts) when the caller has it
    already, as ``db stats`` does from the store's stats; ``None`` counts them.

    Returns
    -------
    dict or None
        ``rows``, ``records`` (the hardware key's records when it was fitted), ``fitted_at``
        (Unix time) and ``fresh`` (a reader would take it: this tunecache's features, and the
        key's records within :data:`REFIT_GROWTH` of those); ``{"error": ...}`` for a document
        that does not decode; ``None`` when nothing is kept.
    """
    text = store.get_derived(derived_name(hardware))
    if text is None:
        return None
    try:
        doc = _kept_doc(text, hardware)
        at = doc.get("fitted_at")
        if not isinstance(at, (int, float)):
            raise InvalidRecordError("its fitting time is missing")
    except InvalidRecordError as err:
        return {"error": str(err)}
    return {"rows": doc["rows"], "records": doc["records"], "fitted_at": float(at),
            "fresh": _fresh(doc, store.count_records(hardware) if records is None else records)}


def _kept_doc(text: str, hardware: Any) -> dict[str, Any]:
    """The kept document ``text`` for ``hardware``, decoded as untrusted JSON and checked.

    Raises
    ------
    InvalidRecordError
        If it does not decode, is not a kept model of ``hardware``, or lacks its counts.
    """
    from tunecache.store.records import decode_json_text

    doc = decode_json_text(text, "kept cost model")
    if not isinstance(doc, dict) or doc.get("format") != KEPT_FORMAT or doc.get("hardware") != hardware.id:
        raise InvalidRecordError("not a kept cost model of this hardware key")
    rows, records = doc.get("rows"), doc.get("records")
    if not isinstance(rows, int) or not isinstance(records, int) or rows < 0 or records < 0:
        raise InvalidRecordError("its row and record counts are missing")
    return doc


def _fresh(doc: dict[str, Any], now: int) -> bool:
    """Whether a reader takes the kept ``doc`` while the key holds ``now`` records: this
    tunecache's features, and at most :data:`REFIT_GROWTH` times the records it was fitted beside."""
    return doc.get("feature_version") == FEATURE_VERSION and now <= REFIT_GROWTH * doc["records"]


def _read_kept(store: Any, hardware: Any, now: int, min_rows: int) -> KeptModel | None:
    """The kept model if there is one, it decodes, and it is fresh enough; else ``None``."""
    try:
        text = store.get_derived(derived_name(hardware))
        if text is None:
            return None
        doc = _kept_doc(text, hardware)
        if not _fresh(doc, now) or doc["rows"] < min_rows:
            return None  # for other features, too small a sample, or the store grew since: fitted again
        model = CostModel.from_json(doc.get("model"))  # type: ignore[arg-type]
    except (InvalidRecordError, StoreError) as err:
        log.info("tunecache: the store's kept cost model is not used (%s); fitting it again", err)
        return None
    return KeptModel(model, doc["rows"], doc["records"], "kept")
