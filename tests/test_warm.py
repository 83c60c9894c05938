"""tunecache warm: shared tasks tuned once, all hits the second time, resumable after SIGKILL,
two warmers on one store never tune a task twice, and the dry run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tunecache.cli import main
from tunecache.store import Store
from tunecache.tvm_layer.target import hardware_key, resolve_target

pytestmark = pytest.mark.tvm
HERE = Path(__file__).parent
MODELS = [f"{HERE / '_warm_models.py'}:model_a", f"{HERE / '_warm_models.py'}:model_b"]
BUDGET = 8


def _warm(db: Path, *extra: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunecache.cli", "warm", *MODELS, "--db", str(db),
                           "--budget", str(BUDGET), "--reuse-budget", "4", "--seed", "1", "--json", *extra],
                          capture_output=True, text=True, timeout=timeout)


def _per_task_records(db: Path) -> dict[str, int]:
    s = Store(str(db))
    counts: dict[str, int] = {}
    for r in s.records():
        counts[r.workload.shash] = counts.get(r.workload.shash, 0) + 1
    return counts


def test_shared_tasks_are_tuned_once_and_a_second_warm_is_all_hits(tmp_path: Path, capfd) -> None:
    db = tmp_path / "w.db"
    first = _warm(db)
    assert first.returncode == 0, first.stderr[-3000:]
    rep = json.loads(first.stdout)
    steps = rep["steps"]
    assert len({s["workload"] for s in steps}) == len(steps)  # each distinct task once
    assert len(steps) == 3  # model_a and model_b share their first layer
    assert all(s["outcome"] in ("tuned", "reused") for s in steps)
    assert all(0 < n <= BUDGET for n in _per_task_records(db).values())
    capfd.readouterr()  # the second warm in this process (TVM loaded already), the same command
    assert main(["warm", *MODELS, "--db", str(db), "--budget", str(BUDGET), "--reuse-budget", "4", "--json"]) == 0
    rep2 = json.loads(capfd.readouterr().out)
    assert rep2["trials"] == 0 and rep2["steps"] == [] and len(rep2["hits"]) == 3


def test_killed_warm_resumes_without_tuning_anything_twice(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    cmd = [sys.executable, "-m", "tunecache.cli.main", "warm", *MODELS, "--db", str(db), "--budget", str(BUDGET),
           "--seed", "2", "--no-bridges"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Kill as soon as the first task is committed: others are in flight or not started.
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        done = sum(1 for _ in Store(str(db)).records()) if db.exists() else 0
        if done > 0:
            break
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    before = _per_task_records(db)
    assert before, "the warm was killed before committing anything"
    second = _warm(db, "--no-bridges")
    assert second.returncode == 0, second.stderr[-3000:]
    after = _per_task_records(db)
    assert len(after) == 3  # none lost
    assert all(n <= BUDGET for n in after.values())  # none tuned twice: resumed with what was left
    s = Store(str(db))
    from tunecache.tvm_layer.target import hardware_key

    hw = hardware_key(None)
    # Every workload with a valid program is done. One whose candidates all failed (a run timed
    # out on a loaded machine) is rightly not: the next warm retries it.
    not_done = {str(r.workload) for r in s.records(valid_only=True) if not s.is_done(r.workload, hw)}
    assert not not_done, (not_done, second.stdout[-3000:])


def test_two_warmers_share_the_work(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    Store(str(db)).close()
    cmd = [sys.executable, "-m", "tunecache.cli.main", "warm", *MODELS, "--db", str(db), "--budget", str(BUDGET),
           "--no-bridges", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reps = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        reps.append(json.loads(out))
    counts = _per_task_records(db)
    assert len(counts) == 3 and all(0 < n <= BUDGET for n in counts.values())
    searched = [s["workload"] for r in reps for s in r["steps"] if s["trials"] > 0]
    assert len(searched) == len(set(searched)) == 3  # every task searched by exactly one warmer


def test_dry_run_prints_the_plan_and_measures_nothing(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    out = subprocess.run([sys.executable, "-m", "tunecache.cli.main", "warm", *MODELS, "--db", str(db), "--dry-run"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trials estimated vs" in out.stdout and "dry run" in out.stdout
    assert Store(str(db)).count_records() == 0


def test_zoo_file(tmp_path: Path) -> None:
    from tunecache.errors import ConfigError
    from tunecache.warming import load_zoo_file

    z = tmp_path / "zoo.toml"
    z.write_text('targets = ["llvm"]\n[[model]]\nname = "bert_base"\nseq_len = 64\n'
                 f'[[model]]\nfactory = "{HERE / "_warm_models.py"}:model_a"\n')
    specs, targets = load_zoo_file(z)
    assert specs[0] == "bert_base:seq_len=64" and specs[1].endswith("_warm_models.py:model_a") and targets == ["llvm"]
    z.write_text("[[model]]\nsize = 3\n")
    with pytest.raises(ConfigError, match="name, onnx, factory"):
        load_zoo_file(z)


def test_warm_from_python_plans_then_tunes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tunecache.warm`` is one of the three things users do: it is public and works from Python.
    A warm that tuned ends by keeping the store's cost model in it (for the next replay compile;
    a store this small gives it only with the bar lowered)."""
    import tunecache
    from tunecache import replay
    from tunecache.search.gradient.kept import derived_name

    monkeypatch.setattr(replay, "MODEL_MIN_ROWS", 1)
    db = str(tmp_path / "py.db")
    plan = tunecache.warm(MODELS, store=db, full_trials=4, reuse_trials=2, seed=1, dry_run=True, progress=False)
    assert isinstance(plan, tunecache.WarmReport) and plan.dry_run and plan.trials == 0
    assert len(json.loads(plan.plan_json)["nodes"]) >= 3 and Store(db).count_records() == 0
    assert Store(db).get_derived(derived_name(hardware_key(resolve_target(None)))) is None
    rep = tunecache.warm(MODELS, store=db, full_trials=4, reuse_trials=2, seed=1, progress=False, bridges=False)
    assert {o.outcome for o in rep.outcomes} <= {"tuned", "reused"} and len(rep.outcomes) == 3
    assert 0 < rep.trials and Store(db).count_records() == rep.trials
    # As after compile's searches, the store's best of each searched task is a re-measured one
    # (the ranking replays and the next model's narrowed searches pick their source by).
    st, hw = Store(db), hardware_key(resolve_target(None))
    assert any(o.trials > 1 for o in rep.outcomes)
    assert all(st.best_k(o.key, hw, 1)[0].cv is not None for o in rep.outcomes if o.trials > 1)
    doc = json.loads(st.get_derived(derived_name(hw)) or "{}")
    assert doc["records"] == st.count_records(hw) and doc["rows"] >= 1 and doc["hardware"] == hw.id
    # A warm with nothing to tune keeps one where none is (a store warmed before models were kept).
    st.put_derived(derived_name(hw), "{}")
    again = tunecache.warm(MODELS, store=db, full_trials=4, reuse_trials=2, seed=1, progress=False, bridges=False)
    assert again.trials == 0 and json.loads(st.get_derived(derived_name(hw)) or "{}") == doc | {
        "fitted_at": json.loads(st.get_derived(derived_name(hw)) or "{}")["fitted_at"]}


def test_a_warm_shares_each_task_by_its_own_models_time(tmp_path: Path, monkeypatch) -> None:
    """Both models' tasks are planned together, and each task's share of estimated time (what
    decides whether a reused task gets its replay only, or is escalated) is of its own model:
    model_b's own layer is a larger share of model_b than of the two models together, and the
    layer both models have counts once in each."""
    from tunecache import warming
    from tunecache.search import execute

    seen: dict[str, Any] = {}
    real = execute._work_shares

    def watched(mp: Any, mods: Any) -> dict[str, float]:
        seen.update(mp=mp, mods=mods)
        return real(mp, mods)

    monkeypatch.setattr(execute, "_work_shares", watched)
    rep = warming.warm(MODELS, store=str(tmp_path / "w.db"), full_trials=2, reuse_trials=1, seed=1,
                       progress=False, bridges=False)
    assert rep.outcomes and seen, "the warm planned nothing"
    mp, mods = seen["mp"], seen["mods"]
    assert set(mp.models) == set(mp.tasks)
    by_models = {tuple(sorted(m)): n for n, m in mp.models.items()}
    assert set(by_models) == {(MODELS[0],), (MODELS[1],), tuple(sorted(MODELS))}
    assert mp.models[by_models[tuple(sorted(MODELS))]] == {MODELS[0]: 1.0, MODELS[1]: 1.0}
    own, whole = real(mp, mods), real(replace(mp, models={}), mods)
    only_b = by_models[(MODELS[1],)]
    assert own[only_b] > whole[only_b]
    assert all(own[n] >= whole[n] for n in mp.tasks)
