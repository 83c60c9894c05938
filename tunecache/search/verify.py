"""``tunecache db verify``: bring records measured with another TVM version back into service.

A record is an exact hit only under the TVM version it was measured with. After an upgrade,
``verify`` replays each such record's trace on its workload with the current TVM (on a machine
whose hardware key differs only in the TVM version): a trace that still replays is re-admitted
as a ``verified`` copy under the current hardware key (same trace, same latency, or a fresh
re-measurement for a sample of them); one that no longer replays is marked stale.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from typing import Any

from tunecache.errors import TunecacheError
from tunecache.store.keys import HardwareKey
from tunecache.store.records import Record

__all__ = ["VerifyReport", "verify_store"]


@dataclass(frozen=True)
class VerifyReport:
    """Counts of a verification, with one line per problem."""

    checked: int
    readmitted: int
    stale: int
    remeasured: int
    problems: tuple[str, ...] = ()

    def summary(self) -> str:
        return (f"checked {self.checked} records from other TVM versions: {self.readmitted} re-admitted "
                f"({self.remeasured} re-measured), {self.stale} marked stale")


def _same_but_version(a: HardwareKey, b: HardwareKey) -> bool:
    return a.target == b.target and a.fingerprint == b.fingerprint and a.tvm_version != b.tvm_version


def verify_store(store: Any, hardware: HardwareKey, target: Any, *, remeasure: int = 0, seed: int = 0) -> VerifyReport:
    """Verify the valid records of other TVM versions for ``hardware`` (see the module doc).

    Parameters
    ----------
    store
        A writable store.
    hardware
        The current hardware key (this machine, this TVM).
    target
        The TVM target matching ``hardware`` (for re-measurement).
    remeasure
        Re-measure this many re-admitted records (a random sample) instead of trusting the old
        latency.
    """
    from tunecache.tvm_layer.convert import trace_replays, workload_from_json

    olds = [k for k in store.hardware_keys() if _same_but_version(hardware, k)]
    candidates: list[Record] = []
    for k in olds:
        candidates += [r for r in store.records(hardware=k, valid_only=True) if not r.stale]
    rng = random.Random(seed)
    sample = set(r.uid for r in rng.sample(candidates, min(remeasure, len(candidates)))) if remeasure else set()
    mods: dict[Any, Any] = {}
    readmit: list[Record] = []
    stale: list[str] = []
    problems: list[str] = []
    n_re = 0
    for r in candidates:
        if r.workload not in mods:
            sw = store.get_workload(r.workload)
            try:
                mods[r.workload] = workload_from_json(sw.key, sw.mod_json).mod if sw else None
            except TunecacheError as err:
                mods[r.workload] = None
                problems.append(f"workload {r.workload}: {err}")
        mod = mods[r.workload]
        why = "its workload no longer decodes" if mod is None else trace_replays(r, mod)
        if why is not None:
            stale.append(r.uid)
            problems.append(f"record {r.uid}: stale ({why})")
            continue
        uid = hashlib.sha256(f"{r.uid}:{hardware.id}".encode()).hexdigest()[:32]
        copy = replace(r, hardware=hardware, uid=uid, provenance=replace(r.provenance, kind="verified",
                                                                          tvm_version=hardware.tvm_version))
        if r.uid in sample:
            from tunecache.search.remeasure import remeasure as measure

            try:
                m = measure(mod, r.trace, target)
                copy = copy.with_latency(m.median_s, m.cv)
                n_re += 1
            except TunecacheError as merr:
                stale.append(r.uid)
                problems.append(f"record {r.uid}: stale (does not build or run: {merr})")
                continue
        readmit.append(copy)
    if readmit:
        store.commit_records(readmit)
    if stale:
        store.mark_stale(stale)
    return VerifyReport(len(candidates), len(readmit), len(stale), n_re, tuple(problems))
