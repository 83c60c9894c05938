"""Transfer learning for full search: an XGBoost cost model that starts trained on the store.

AutoTVM (Section 4 of "Learning to Optimize Tensor Programs") trains the cost model on programs
measured for *other* workloads, with features that do not depend on the workload (MetaSchedule's
per-store features are such). MetaSchedule's ``XGBModel`` groups its training data by workload
and learns each program's latency relative to its group's best, so records of other workloads
are usable as they are: each becomes one group.

Why it can matter here: ``XGBModel`` predicts random scores until it has seen
``num_warmup_samples`` (100) measurements, so a single task searched with a few tens of trials
never uses its cost model at all. A model pre-trained on the store ranks candidates from the
first round.

Measured (``docs/reuse.md``, operator sets): a plan whose full searches share one model
pre-trained here reached 0.999x full search's weighted throughput on resnet50's conv tasks, against
0.823x with a fresh model per search, so :func:`tunecache.search.execute.execute_plan` uses it by
default. ``tools/bench_transfer.py`` isolates the effect on single full searches.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from itertools import islice
from typing import Any

from tunecache.store.keys import HardwareKey, WorkloadKey

__all__ = ["PretrainedOnUse", "TransferInfo", "pretrained_cost_model", "resolve_cost_model"]

log = logging.getLogger("tunecache")

#: Newest valid records read per family to pre-train on.
MAX_RECORDS = 4096


@dataclass(frozen=True)
class TransferInfo:
    """What a pre-trained cost model was trained on.

    Attributes
    ----------
    workloads
        Workloads whose records were used.
    records
        Programs (records) the model was trained on.
    skipped
        Records that could not be replayed (stale, another TVM) and were left out.
    """

    workloads: int
    records: int
    skipped: int


def _spread(records: list[Any], n: int) -> list[Any]:
    """Up to ``n`` records evenly spread over the latency ranking (best and worst included)."""
    ranked = sorted(records, key=lambda r: r.latency_s)
    if len(ranked) <= n:
        return ranked
    step = (len(ranked) - 1) / (n - 1)
    return [ranked[round(i * step)] for i in range(n)]


def pretrained_cost_model(
    store: Any,
    hardware: HardwareKey,
    target: Any,
    *,
    exclude: Collection[WorkloadKey] = (),
    families: Collection[str] | None = None,
    per_workload: int = 32,
    max_workloads: int = 64,
    max_records: int = MAX_RECORDS,
    num_tuning_cores: int | None = None,
) -> tuple[Any, TransferInfo]:
    """Return an ``XGBModel`` trained on the store's records of ``hardware``, and what it saw.

    Parameters
    ----------
    store, hardware
        Where the records come from: only records measured on this hardware key.
    target
        The ``tvm.target.Target`` the features are extracted for.
    exclude
        Workloads to leave out (e.g. the tasks about to be searched, when measuring transfer).
    families
        Only workloads of these operator families (``None``: any), e.g. those of the tasks about
        to be searched.
    per_workload
        Records per workload, spread over its latency ranking.
    max_workloads
        Most workloads used (those with the most valid records among those read first).
    max_records
        Most records read from the store per family (the newest): the cost of pre-training does
        not grow with the store.
    num_tuning_cores
        XGBoost threads (MetaSchedule's default when ``None``).

    Returns
    -------
    (XGBModel, TransferInfo)
        The model (untrained, as MetaSchedule's default, when the store has nothing usable).
    """
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.store.records import decode_trace
    from tunecache.tvm_layer.convert import workload_from_json

    model = ms.cost_model.XGBModel(num_tuning_cores=num_tuning_cores, adaptive_training=True)
    skip = {k.shash for k in exclude}
    by_workload: dict[str, list[Any]] = {}
    for fam in sorted(families) if families is not None else [None]:
        newest = store.iter_records(hardware=hardware, family=fam, valid_only=True, newest_first=True)
        for rec in islice(newest, max_records):
            if rec.workload.shash not in skip and not rec.stale and rec.latency_s:
                by_workload.setdefault(rec.workload.shash, []).append(rec)
    chosen = sorted(by_workload.values(), key=len, reverse=True)[:max_workloads]
    n_records = n_skipped = n_workloads = 0
    for recs in chosen:
        if len(recs) < 2:
            continue  # one program says nothing about what is faster
        stored = store.get_workload(recs[0].workload)
        if stored is None or not stored.mod_json:
            continue
        try:
            mod = workload_from_json(stored.key, stored.mod_json).mod
        except Exception:  # noqa: BLE001 - an undecodable workload is skipped
            continue
        candidates, results = [], []
        for rec in _spread(recs, per_workload):
            try:
                sch = Schedule(mod)
                Trace.apply_json_to_schedule(decode_trace(rec.trace), sch)
            except Exception:  # noqa: BLE001 - a trace that no longer replays is skipped
                n_skipped += 1
                continue
            args_info = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            candidates.append(ms.MeasureCandidate(sch, args_info))
            results.append(RunnerResult(run_secs=[float(rec.latency_s)], error_msg=None))
        if len(candidates) < 2:
            continue
        model.update(ms.TuneContext(mod=mod, target=target), candidates, results)
        n_records += len(candidates)
        n_workloads += 1
    # Train on everything once more, then keep training on each round of the new search: the
    # new task's own measurements must count from its first round.
    model.adaptive_training = False
    info = TransferInfo(n_workloads, n_records, n_skipped)
    log.info("tunecache: cost model pre-trained on %d records of %d workloads (%d skipped)",
             n_records, n_workloads, n_skipped)
    return model, info


class PretrainedOnUse:
    """A plan's shared cost model, pre-trained (:func:`pretrained_cost_model`) the first time an
    evolutionary search asks for it, on the families of the tasks that search is given.

    With the gradient search as the default, the evolutionary search takes only the tasks without
    a tiling sketch (pooling, reshapes, reductions); pre-training on every family of the plan
    before the first search cost VGG-16 from the zoo's store 18.8 s of its 106 s of tuning
    (4,096 conv and dense records replayed and featurized) for a model the searches of its
    pooling tasks used.
    """

    def __init__(self, store: Any, hardware: HardwareKey, target: Any) -> None:
        self.store, self.hardware, self.target = store, hardware, target
        self.model: Any = None
        self.info: TransferInfo | None = None

    def get(self, families: Collection[str]) -> Any:
        """The model, pre-trained on ``families`` (``""`` entries: unknown) at the first call."""
        if self.model is None:
            known = {f for f in families if f}
            self.model, self.info = pretrained_cost_model(self.store, self.hardware, self.target,
                                                          families=known or None)
        return self.model


def resolve_cost_model(model: Any, families: Collection[str]) -> Any:
    """The cost model a search of tasks of ``families`` uses: ``model`` itself, or what a
    :class:`PretrainedOnUse` holds for them."""
    return model.get(families) if isinstance(model, PretrainedOnUse) else model
