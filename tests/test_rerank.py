"""tunecache db rerank: a store's best records re-measured side by side on this machine and ranked
by what they take now (a record measured at another moment, or with a lucky figure, falls back)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from _models import te_matmul

from tunecache.errors import ConfigError
from tunecache.search import remeasure
from tunecache.store import Store
from tunecache.tvm_layer.database import make_database


def test_the_command_line_defaults_are_the_library_defaults(capsys) -> None:
    """``db rerank --help`` names the defaults ``rerank_store`` takes when called from Python."""
    import inspect

    from tunecache.cli.main import main

    assert main(["db", "rerank", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    params = inspect.signature(remeasure.rerank_store).parameters
    assert f"from its best down (default {params['top'].default})" in text
    assert f"interleaved rounds (default {params['rounds'].default})" in text


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunecache.cli.main", "db", "rerank", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.tvm
def test_a_lucky_record_falls_back_from_python_and_from_the_command_line(tmp_path) -> None:
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    tvm = load_tvm()
    target = resolve_target(None)
    hw = hardware_key(target)
    db = str(tmp_path / "r.db")
    store = Store(db)
    # 128^3: TVM's default schedule (serial scalar loops) takes several times a tuned program.
    mod = te_matmul(tvm, 128, 128, 128)
    tune_tasks([FullSearchTask("mm", mod)], target, make_database(store, hw, target), trials_per_task=4,
               seed=3, work_dir=str(tmp_path / "w"))
    key = workload_of(mod)[0]
    name = store.get_workload(key).desc.name
    tuned = store.best_k(key, hw, 10)
    assert len(tuned) >= 2

    def lucky(tag: str):
        # The default schedule with a lucky figure, its cv set as a re-measurement leaves it: the
        # re-measurements after a search skip such a record; a re-rank does not.
        rec = replace(tuned[0], uid=tag + tuned[0].uid[len(tag):], trace=[[], []], run_secs=(1e-9,),
                      latency_s=1e-9, cv=0.01)
        store.commit_record(rec)
        assert store.best_k(key, hw, 1)[0].uid == rec.uid
        return rec

    first = lucky("lucky1")
    with pytest.raises(ConfigError, match="top must be >= 2"):
        remeasure.rerank_store(store, hw, target, top=1)
    with pytest.raises(ConfigError, match=f"did you mean '{name}'"):
        remeasure.rerank_store(store, hw, target, names=[name + "x"])
    seen: list[tuple[int, int, str]] = []
    [got] = remeasure.rerank_store(store, hw, target, top=3, rounds=2, names=[name],
                                   on_workload=lambda i, n, r: seen.append((i, n, r.name)))
    assert seen == [(0, 1, name)]
    assert got.before_uid == first.uid and got.changed and got.records >= 3 and got.failed == 0
    assert got.stored_s == 1e-9 and got.before_s is not None and got.after_s is not None
    assert got.gain == pytest.approx(got.before_s / got.after_s) and got.gain > 1.0
    best = store.best_k(key, hw, 3)
    assert best[0].uid == got.after_uid and best[0].latency_s == got.after_s
    assert [r.latency_s for r in best] == sorted(r.latency_s for r in best)
    [again] = [r for r in store.records(workload=key, hardware=hw) if r.uid == first.uid]
    assert again.latency_s == got.before_s and again.run_secs == (1e-9,)  # raw figures stay as measured

    second = lucky("lucky2")
    out = _cli("--db", db, "--top", "3", "--rounds", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "re-ranked 1 workload" in out.stdout and "1 changed their best" in out.stdout
    assert f"[rerank] 1/1 {name}: " in out.stderr and "best changed" in out.stderr
    assert store.best_k(key, hw, 1)[0].uid != second.uid
    as_json = _cli("--db", db, "--top", "2", "--rounds", "1", "--json", "-q")
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    [entry] = json.loads(as_json.stdout)
    assert entry["name"] == name and entry["records"] >= 2 and "[rerank]" not in as_json.stderr

    # Another machine's records are not re-ranked here: the error says where to run it.
    other = _cli("--db", db, "--target", "llvm -mcpu=skylake-avx512")
    assert other.returncode == 1 and "no records for this machine's hardware key" in other.stderr
