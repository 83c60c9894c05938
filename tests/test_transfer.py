"""Transfer learning: an XGBoost cost model pre-trained on a real store's records."""

from __future__ import annotations

import numpy as np
import pytest
from _models import relax_matmul_relu

import tunecache
from tunecache.store import Store

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def tuned_store(tmp_path_factory):
    """A store with the records of a real 16-trial search of one matmul."""
    db = str(tmp_path_factory.mktemp("transfer") / "t.db")
    tunecache.compile(relax_matmul_relu(64, 128, 64), store=db, trials_per_task=16, seed=2, progress=False)
    return db


def test_model_is_trained_on_the_store_and_ranks_its_programs(tuned_store, target) -> None:
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.search.transfer import pretrained_cost_model
    from tunecache.store.records import decode_trace
    from tunecache.tvm_layer.convert import workload_from_json
    from tunecache.tvm_layer.target import hardware_key

    st, hw = Store(tuned_store), hardware_key(target)
    recs = [r for r in st.records(hardware=hw, valid_only=True, family="matmul")]
    assert len(recs) >= 4
    model, info = pretrained_cost_model(st, hw, target)
    assert info.workloads >= 1 and info.records >= 4 and info.skipped == 0
    assert model.data_size == info.records and model.booster is not None
    assert not model.adaptive_training  # the next search's own rounds retrain it

    # Past the warm-up threshold the model predicts (not random): the stored fastest program
    # scores above the stored slowest one.
    model.num_warmup_samples = 0
    ranked = sorted(recs, key=lambda r: r.latency_s)
    key = ranked[0].workload
    mod = workload_from_json(key, st.get_workload(key).mod_json).mod
    args = ms.arg_info.ArgInfo.from_prim_func(next(f for _, f in mod.functions.items()))
    cands = []
    for r in (ranked[0], ranked[-1]):
        sch = Schedule(mod)
        Trace.apply_json_to_schedule(decode_trace(r.trace), sch)
        cands.append(ms.MeasureCandidate(sch, args))
    ctx = ms.TuneContext(mod=mod, target=target)
    first, second = model.predict(ctx, cands), model.predict(ctx, cands)
    np.testing.assert_array_equal(first, second)  # deterministic: the trained booster, not random
    if ranked[-1].latency_s > 1.5 * ranked[0].latency_s:
        assert first[0] > first[1]


def test_excluded_or_missing_records_give_an_untrained_model(tuned_store, target, tmp_path) -> None:
    from tunecache.search.transfer import pretrained_cost_model
    from tunecache.tvm_layer.target import hardware_key

    st, hw = Store(tuned_store), hardware_key(target)
    keys = {r.workload for r in st.records(hardware=hw)}
    model, info = pretrained_cost_model(st, hw, target, exclude=keys)
    assert (info.workloads, info.records) == (0, 0) and model.data_size == 0
    _model, info = pretrained_cost_model(Store(str(tmp_path / "empty.db")), hw, target)
    assert info.records == 0


def test_plan_model_is_pretrained_on_use_on_the_searched_families(tuned_store, target) -> None:
    """The plan's shared model costs nothing until an evolutionary search asks for it, then is
    trained once, on the families of the tasks that search is given."""
    from tunecache.search.transfer import PretrainedOnUse, resolve_cost_model
    from tunecache.tvm_layer.target import hardware_key

    st, hw = Store(tuned_store), hardware_key(target)
    lazy = PretrainedOnUse(st, hw, target)
    assert lazy.model is None and lazy.info is None
    model = resolve_cost_model(lazy, {"pool2d"})  # no stored program of that family
    assert lazy.info is not None and lazy.info.records == 0 and model.data_size == 0
    assert resolve_cost_model(lazy, {"matmul"}) is model  # trained once a plan
    trained = PretrainedOnUse(st, hw, target)
    assert resolve_cost_model(trained, {"matmul", ""}).data_size >= 4
    assert trained.info is not None and trained.info.workloads >= 1
    plain = object()
    assert resolve_cost_model(plain, {"matmul"}) is plain
