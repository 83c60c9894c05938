"""The reuse index (issue 18): planning decodes only what it uses, and chooses what a full scan chose.

``tests/data/store_v2.sqlite`` is a store of schema 2 (before the index): six real workloads
(five matmuls, one conv2d) with three records each under a fixed hardware key for the target
``{"kind": "llvm", "num-cores": 2}``. It was written by schema-3 tunecache, then its
``tc_reuse`` table dropped and its version set to 2, which is what schema 2 was.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

tvm = pytest.importorskip("tvm")

from _models import te_conv, te_matmul  # noqa: E402

from tunecache.errors import SchemaVersionError  # noqa: E402
from tunecache.planning import index_workloads, make_plan, reuse_sources  # noqa: E402
from tunecache.reuse.costs import CostModel  # noqa: E402
from tunecache.reuse.planner import ModelPlan, plan_tasks  # noqa: E402
from tunecache.store import (  # noqa: E402
    SCHEMA_VERSION,
    HardwareKey,
    HostFingerprint,
    Provenance,
    Record,
    Store,
    WorkloadKey,
)
from tunecache.testing.store_contract import TRACE  # noqa: E402
from tunecache.tvm_layer import convert  # noqa: E402
from tunecache.tvm_layer.bridges import describe_tasks  # noqa: E402
from tunecache.tvm_layer.target import canonical_target, resolve_target  # noqa: E402

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Task:
    key: WorkloadKey
    name: str
    weight: float
    mod: Any


@pytest.fixture(scope="module")
def target() -> Any:
    return resolve_target({"kind": "llvm", "num-cores": 2})


@pytest.fixture(scope="module")
def hw(target: Any) -> HardwareKey:
    return HardwareKey(canonical_target(target), HostFingerprint("Test CPU", ("avx2",), 2), tvm.__version__)


def task(mod: Any, name: str) -> Task:
    key, _json, _ = convert.workload_of(mod)
    return Task(key, name, 1.0, mod)


def store_with(path: Path, hw: HardwareKey, mods: list[tuple[str, Any]]) -> Store:
    """A store holding ``mods`` as tuned workloads (two records each, no tuning)."""
    st = Store(str(path))
    for i, (name, mod) in enumerate(mods):
        key, mod_json, _ = convert.workload_of(mod)
        desc = convert.describe_module(mod, name)
        st.commit_workload(key, desc, mod_json)
        st.commit_records([
            Record.from_measurement(key, hw, TRACE, ((i + 1 + j) * 1e-4,), [["TENSOR", "float32", [4, 4]]],
                                    Provenance(kind="tuned", trials=8, seconds=4.0))
            for j in range(2)
        ], descs={key: desc})
    return st


def full_scan_plan(misses: list[Task], target: Any, hw: HardwareKey, st: Store) -> ModelPlan:
    """The plan as tunecache made it before the index: every stored workload decoded and described."""
    planned = {t.key for t in misses}
    stored = []
    for key in sorted({r.workload for r in st.records(hardware=hw, valid_only=True)} - planned, key=str):
        sw = st.get_workload(key)
        assert sw is not None
        stored.append((key, sw.desc.name or key.shash[:8], 0.0, convert.workload_from_json(key, sw.mod_json).mod))
    return plan_tasks(describe_tasks([(t.key, t.name, t.weight, t.mod) for t in misses], target),
                      stored=describe_tasks(stored, target), cost_model=CostModel(full_trials=64), bridges=False)


def sources(mp: ModelPlan) -> dict[str, Any]:
    return {n: mp.source_of(n) for n in mp.tasks}


@pytest.fixture
def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[WorkloadKey]:
    decoded: list[WorkloadKey] = []
    real = convert.workload_from_json

    def spy(key: WorkloadKey, mod_json: str) -> Any:
        decoded.append(key)
        return real(key, mod_json)

    monkeypatch.setattr(convert, "workload_from_json", spy)
    return decoded


def test_planning_decodes_only_what_the_index_lacks(tmp_path: Path, target: Any, hw: HardwareKey,
                                                    count_decodes: list[WorkloadKey]) -> None:
    unrelated = [(f"conv{c}", te_conv(tvm, (1, c, 8, 8), 3, c, pad=1)) for c in (4, 8, 12, 16, 20, 24)]
    related = [(f"mm{m}", te_matmul(tvm, m, 64, 64)) for m in (16, 32, 48, 80, 96, 112, 128, 160, 192, 224)]
    st = store_with(tmp_path / "s.db", hw, unrelated + related)
    miss = task(te_matmul(tvm, 64, 64, 64), "miss")
    # A store written before the index: the first plan indexes every stored workload, once.
    mp = make_plan([miss], target, hw, st, bridges=False, full_trials=64, per_miss=2)
    assert len(count_decodes) == len(unrelated) + len(related)
    assert len(set(count_decodes)) == len(count_decodes)
    assert st.unindexed_workloads(hw) == []
    # Every later plan decodes nothing: sources come from the index, the nearest 2 a side.
    count_decodes.clear()
    again = make_plan([miss], target, hw, st, bridges=False, full_trials=64, per_miss=2)
    assert count_decodes == []
    considered = sorted(s.name for s in again.stored.values())
    assert considered == ["mm32", "mm48", "mm80", "mm96"]
    assert sources(again) == sources(mp)
    assert again.source_of(next(iter(again.tasks)))["kind"] == "store"


def test_index_picks_the_source_a_full_scan_picks(tmp_path: Path, target: Any, hw: HardwareKey) -> None:
    mods = [(f"mm{m}x{n}x{k}", te_matmul(tvm, m, n, k))
            for m, n, k in [(32, 32, 32), (128, 128, 128), (256, 64, 128), (96, 96, 96), (512, 512, 256)]]
    mods.append(("conv", te_conv(tvm, (1, 16, 14, 14), 3, 32, pad=1)))
    st = store_with(tmp_path / "s.db", hw, mods)
    misses = [task(te_matmul(tvm, 64, 64, 64), "a"), task(te_matmul(tvm, 200, 60, 100), "b"),
              task(te_conv(tvm, (1, 16, 7, 7), 3, 16, pad=1), "c"), task(te_matmul(tvm, 600, 600, 600), "d"),
              task(te_conv(tvm, (1, 7, 7, 16), 3, 16, pad=1, layout="NHWC"), "nhwc")]
    want = full_scan_plan(misses, target, hw, st)
    got = make_plan(misses, target, hw, st, bridges=False, full_trials=64)
    assert sources(got) == sources(want)
    assert {s["kind"] for s in sources(got).values()} == {"store", "root"}  # the test can tell them apart
    # The misses' own entries were committed: once tuned, they are sources for the next model.
    assert len(st.reuse_entries(hw.target_id, [t.key for t in misses])) == len(misses)


def test_reuse_sources_are_bounded_per_miss(tmp_path: Path, target: Any, hw: HardwareKey) -> None:
    st = store_with(tmp_path / "s.db", hw, [(f"mm{m}", te_matmul(tvm, m, 32, 32)) for m in range(8, 200, 8)])
    index_workloads(st, hw, target)
    (miss,) = describe_tasks([(WorkloadKey("x"), "x", 1.0, te_matmul(tvm, 100, 32, 32))], target)
    got = reuse_sources(st, hw, [miss], per_miss=3)
    assert sorted(t.name for t in got) == ["mm104", "mm112", "mm120", "mm80", "mm88", "mm96"]


def test_upgrade_from_schema_2_fills_the_index_and_plans_the_same(tmp_path: Path, target: Any) -> None:
    path = tmp_path / "v2.db"
    shutil.copy(DATA / "store_v2.sqlite", path)
    with pytest.raises(SchemaVersionError, match="tunecache db upgrade"):
        Store(str(path))
    proc = subprocess.run([sys.executable, "-m", "tunecache.cli.main", "db", "upgrade", "--db", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"schema v2 -> v{SCHEMA_VERSION}" in proc.stdout and "reuse index: 6 workloads indexed" in proc.stdout
    st = Store(str(path))
    (hw,) = st.hardware_keys()
    assert st.unindexed_workloads(hw) == []
    stored_target = resolve_target(json.loads(hw.target))
    misses = [task(te_matmul(tvm, 64, 64, 64), "a"), task(te_conv(tvm, (1, 16, 7, 7), 3, 16, pad=1), "b")]
    want = full_scan_plan(misses, stored_target, hw, st)
    got = make_plan(misses, stored_target, hw, st, bridges=False, full_trials=64)
    assert sources(got) == sources(want)
    assert all(s["kind"] == "store" for s in sources(got).values())


def test_a_read_only_team_store_is_indexed_in_the_overlay(tmp_path: Path, target: Any, hw: HardwareKey,
                                                          count_decodes: list[WorkloadKey]) -> None:
    from tunecache.store import OverlayStore

    store_with(tmp_path / "team.db", hw, [(f"mm{m}", te_matmul(tvm, m, 64, 64)) for m in (32, 96, 128)]).close()
    team = Store(str(tmp_path / "team.db"), read_only=True)
    miss = task(te_matmul(tvm, 64, 64, 64), "miss")
    # Read-only alone: described in memory (nothing can be kept), still a source.
    alone = make_plan([miss], target, hw, team, bridges=False, full_trials=64)
    assert len(count_decodes) == 3 and alone.source_of(next(iter(alone.tasks)))["kind"] == "store"
    with OverlayStore(team, Store(str(tmp_path / "mine.db"))) as st:
        count_decodes.clear()
        first = make_plan([miss], target, hw, st, bridges=False, full_trials=64)
        assert len(count_decodes) == 3  # indexed once, into the overlay
        count_decodes.clear()
        again = make_plan([miss], target, hw, st, bridges=False, full_trials=64)
        assert count_decodes == []
        assert sources(again) == sources(first) == sources(alone)
        assert st.unindexed_workloads(hw) == []
