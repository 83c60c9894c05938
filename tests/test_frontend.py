"""Model import, task extraction, building and running; and the model zoo.

The TVM tests use tiny models (small_cnn, a hand-made ONNX graph, a two-op Relax module); whole
zoo models are only imported and split into tasks, never compiled. The default suite of this
file takes well under a minute; tests marked ``slow`` take longer.
"""

from __future__ import annotations

import collections
import json
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunecache import zoo
from tunecache.errors import TargetError, UnsupportedModelError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")


from _models import onnx_cnn as _onnx_cnn  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fe():
    from tunecache.tvm_layer import frontend

    return frontend


@pytest.fixture(scope="module")
def cnn():
    return zoo.get("small_cnn")


@pytest.fixture(scope="module")
def cnn_imported(fe, cnn):
    return fe.import_model(cnn.module, cnn.example_inputs)


def test_importing_a_module_from_python_passes_on_no_warning_of_torchs_own(fe, cnn) -> None:
    """A user's own ``warnings`` settings see nothing torch says about its internals while
    tunecache exports and decomposes their model (other warnings still pass through)."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fe.import_model(cnn.module, cnn.example_inputs)
    assert not [w for w in seen if "treespec" in str(w.message)], [str(w.message) for w in seen]


@pytest.fixture(scope="module")
def cnn_prepared(fe, cnn_imported, target):
    return fe.prepare_for_tuning(cnn_imported, target)


@pytest.fixture(scope="module")
def cnn_tasks(fe, cnn_prepared, target):
    return fe.extract_tasks(cnn_prepared, target)


@pytest.fixture(scope="module")
def cnn_built(fe, cnn_prepared, target):
    return fe.build(cnn_prepared, target)


def _onnx_reference(model, x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"x": x})[0]


# --- import errors (no compilation) -----------------------------------------------------------


def test_torch_module_without_example_inputs(fe, cnn):
    with pytest.raises(UnsupportedModelError, match="example_inputs"):
        fe.import_model(cnn.module)


def test_torch_module_with_numpy_example_inputs(fe, cnn):
    with pytest.raises(UnsupportedModelError, match="must be torch tensors"):
        fe.import_model(cnn.module, (np.zeros((1, 3, 16, 16), "float32"),))


@pytest.mark.parametrize("model", [42, object(), "model.pt", b"bytes"])
def test_unsupported_model_types_list_what_is_accepted(fe, model):
    with pytest.raises(UnsupportedModelError, match="accepted: a torch.nn.Module"):
        fe.import_model(model)


@pytest.mark.tvm
def test_unsupported_onnx_operator_is_named(fe):
    with pytest.raises(UnsupportedModelError, match="FooBarOp"):
        fe.import_model(_onnx_cnn(extra_node="FooBarOp"))


@pytest.mark.tvm
def test_unsupported_torch_operator_is_named(fe):
    class Fft(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs()

    with pytest.raises(UnsupportedModelError, match="fft"):
        fe.import_model(Fft(), (torch.randn(1, 8),))


@pytest.mark.tvm
def test_onnx_symbolic_batch_needs_example_inputs(fe):
    with pytest.raises(UnsupportedModelError, match="example_inputs"):
        fe.import_model(_onnx_cnn(batch="N"))
    imported = fe.import_model(_onnx_cnn(batch="N"), (np.zeros((2, 3, 8, 8), "float32"),))
    assert imported.inputs[0].shape == (2, 3, 8, 8)


def test_missing_onnx_file(fe, tmp_path):
    with pytest.raises(UnsupportedModelError, match="does not exist"):
        fe.import_model(tmp_path / "nope.onnx")


# --- torch -> relax -> build -> run ------------------------------------------------------------


@pytest.mark.tvm
def test_torch_import_records_inputs_and_params(cnn_imported):
    assert cnn_imported.source == "torch"
    assert cnn_imported.torch_io
    assert [(s.name, s.shape, s.dtype) for s in cnn_imported.inputs] == [
        ("x", (1, 3, 16, 16), "float32")
    ]
    assert len(cnn_imported.params) == 8  # 3 conv weights + biases, fc weight + bias
    assert all(name.startswith("p_") for name in cnn_imported.params)


@pytest.mark.tvm
def test_small_cnn_untuned_matches_pytorch(fe, cnn, cnn_imported, cnn_built):
    (x,) = cnn.example_inputs
    want = cnn.module(x)
    got = fe.run(cnn_built, cnn_imported, x)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    got_np = fe.run(cnn_built, cnn_imported, x.numpy())
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-4, atol=1e-5)
    # A second call on a reused VM gives a fresh result (outputs are copied out).
    vm = fe.make_vm(cnn_built)
    x2 = torch.randn_like(x)
    a = fe.run(vm, cnn_imported, x)
    b = fe.run(vm, cnn_imported, x2)
    torch.testing.assert_close(a, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b, cnn.module(x2), rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_run_checks_inputs(fe, cnn_imported, cnn_built):
    with pytest.raises(TypeError, match="takes 1 inputs"):
        fe.run(cnn_built, cnn_imported)
    with pytest.raises(ValueError, match=r"float32\[1, 3, 16, 16\]"):
        fe.run(cnn_built, cnn_imported, np.zeros((2, 3, 16, 16), "float32"))
    with pytest.raises(ValueError, match="float64"):
        fe.run(cnn_built, cnn_imported, np.zeros((1, 3, 16, 16)))


@pytest.mark.tvm
def test_a_caller_runs_as_run_does_and_falls_back_where_dlpack_cannot(fe, cnn, cnn_imported, cnn_built,
                                                                      monkeypatch):
    """``caller`` (what ``CompiledModel`` calls) gives ``run``'s results: torch tensors in and
    out through DLPack, each call a fresh output; an input DLPack or the VM refuses (not
    contiguous, not 64-byte aligned, needing grad) is converted as ``run`` does; a wrong shape
    or dtype is ``run``'s error; numpy in, numpy out."""
    (x,) = cnn.example_inputs
    call = fe.caller(fe.make_vm(cnn_built), cnn_imported)
    want = cnn.module(x).detach()
    a = call(x)
    assert isinstance(a, torch.Tensor)
    torch.testing.assert_close(a, want, rtol=1e-4, atol=1e-5)
    from tunecache.tvm_layer.frontend import building

    with monkeypatch.context() as m:  # a plain tensor never takes the general path
        m.setattr(building, "run", lambda *a, **k: pytest.fail("run() called for a plain CPU tensor"))
        x2 = torch.randn_like(x)
        b = call(x2)
    torch.testing.assert_close(a, want, rtol=1e-4, atol=1e-5)  # not overwritten by the next call
    torch.testing.assert_close(b, cnn.module(x2).detach(), rtol=1e-4, atol=1e-5)
    strided = torch.randn(1, 3, 16, 32)[..., ::2]  # not contiguous
    unaligned = torch.randn(x.numel() + 1)[1:].view_as(x)  # 4 bytes past an aligned start
    needs_grad = x.clone().requires_grad_(True)
    assert not strided.is_contiguous() and unaligned.data_ptr() % 64
    for y in (strided, unaligned, needs_grad):
        torch.testing.assert_close(call(y), cnn.module(y).detach(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"float32\[1, 3, 16, 16\]"):
        call(torch.zeros(2, 3, 16, 16))
    with pytest.raises(ValueError, match="float64"):
        call(torch.zeros(1, 3, 16, 16, dtype=torch.float64))
    got_np = call(x.numpy())
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_exported_program_source(fe, cnn, target):
    ep = torch.export.export(cnn.module, cnn.example_inputs)
    imported = fe.import_model(ep)
    assert imported.source == "exported_program" and imported.torch_io
    ex = fe.build(imported, target)  # an ImportedModel is prepared on the way
    torch.testing.assert_close(
        fe.run(ex, imported, *cnn.example_inputs), cnn.module(*cnn.example_inputs),
        rtol=1e-4, atol=1e-5,
    )  # fmt: skip


@pytest.mark.tvm
def test_export_library_round_trip(fe, cnn, cnn_imported, cnn_built, tmp_path):
    path = fe.export_library(cnn_built, tmp_path / "small_cnn.so")
    lib = fe.load_library(path)
    (x,) = cnn.example_inputs
    torch.testing.assert_close(fe.run(lib, cnn_imported, x), cnn.module(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(FileNotFoundError):
        fe.load_library(tmp_path / "missing.so")


@pytest.mark.tvm
def test_kernels_compiled_in_parallel_match_and_export(fe, cnn, cnn_imported, cnn_prepared, target, tmp_path,
                                                       monkeypatch):
    """The kernels are split over several LLVM modules, compiled on two threads: the VM finds
    every kernel through the library's imports, and the library exports and loads as one file."""
    from tunecache.tvm_layer.frontend import codegen

    monkeypatch.setattr(codegen, "MIN_KERNELS", 1)
    real = codegen.compile_relax
    monkeypatch.setattr("tunecache.tvm_layer.frontend.building.compile_relax",
                        lambda mod, t, pipeline: real(mod, t, pipeline, workers=2))
    ex = fe.build(cnn_prepared, target)
    (lib,) = ex.mod.imports
    assert len(lib.imports) >= 2  # one module per group after the first, imported by it
    (x,) = cnn.example_inputs
    want = cnn.module(x)
    torch.testing.assert_close(fe.run(ex, cnn_imported, x), want, rtol=1e-4, atol=1e-5)
    loaded = fe.load_library(fe.export_library(ex, tmp_path / "parallel.so"))
    torch.testing.assert_close(fe.run(loaded, cnn_imported, x), want, rtol=1e-4, atol=1e-5)


@given(costs=st.lists(st.floats(min_value=0.0, max_value=100.0), max_size=40), groups=st.integers(1, 9))
def test_kernel_groups_cover_every_kernel_once_and_balance(costs, groups):
    from tunecache.tvm_layer.frontend.codegen import kernel_groups

    got = kernel_groups(costs, groups)
    assert sorted(i for g in got for i in g) == list(range(len(costs)))
    assert len(got) <= groups and all(got)
    loads = [sum(costs[i] for i in g) for g in got]
    if len(got) > 1:  # greedy longest-first: groups differ by at most the heaviest kernel
        assert max(loads) - min(loads) <= max(costs) + 1e-9


# --- ONNX and Relax sources -----------------------------------------------------------------


@pytest.mark.tvm
def test_onnx_model_and_path_match_the_onnx_reference(fe, target, tmp_path):
    model = _onnx_cnn()
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    want = _onnx_reference(model, x)
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    for source in (model, path, str(path)):
        imported = fe.import_model(source)
        assert imported.source == "onnx" and not imported.torch_io
        assert imported.params == {}  # ONNX weights are constants in the module
        assert [s.name for s in imported.inputs] == ["x"]
        ex = fe.build(imported, target)
        got = fe.run(ex, imported, x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # torch in, torch out, whatever the source
    got_t = fe.run(ex, imported, torch.from_numpy(x))
    assert isinstance(got_t, torch.Tensor)


@pytest.mark.tvm
def test_onnx_tasks(fe, target):
    imported = fe.import_model(_onnx_cnn())
    tasks = fe.extract_tasks(fe.prepare_for_tuning(imported, target), target)
    families = collections.Counter(t.desc.family for t in tasks)
    assert families["conv2d"] == 1 and families["matmul"] == 1


def _relax_mlp(tvm):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 16), "float32"))
    w = relax.Var("w", relax.TensorType((16, 8), "float32"))
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            z = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(z)
    return bb.get()


@pytest.mark.tvm
def test_relax_module_with_params(fe, tvm, target):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8)).astype("float32")
    x = rng.standard_normal((4, 16)).astype("float32")
    imported = fe.import_model(_relax_mlp(tvm), params={"w": w})
    assert imported.source == "relax"
    assert [(s.name, s.shape) for s in imported.inputs] == [("x", (4, 16))]
    tasks = fe.extract_tasks(fe.prepare_for_tuning(imported, target), target)
    assert [(t.desc.family, t.weight) for t in tasks] == [("matmul", 1)]
    assert tasks[0].desc.shapes == ((4, 16), (16, 8), (4, 8))
    got = fe.run(fe.build(imported, target), imported, x)
    np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
def test_relax_module_missing_params(fe, tvm):
    with pytest.raises(UnsupportedModelError, match="no value in params"):
        fe.import_model(_relax_mlp(tvm))
    with pytest.raises(UnsupportedModelError, match="not a parameter"):
        fe.import_model(_relax_mlp(tvm), params={"v": np.zeros((16, 8), "float32")})


# --- tasks ---------------------------------------------------------------------------------------


@pytest.mark.tvm
def test_small_cnn_tasks(cnn_tasks):
    families = collections.Counter(t.desc.family for t in cnn_tasks)
    assert families["conv2d"] == 3
    assert families["matmul"] == 1
    # Weights bound first: weight transposes (fc, NHWC convs) and bias reshapes are folded, not
    # tasks; the transposes left are the input's (to NHWC) and the one before the flatten.
    assert sorted(t.name for t in cnn_tasks if "transpose" in t.name) == ["fused_transpose6_reshape2", "transpose"]
    assert all(t.weight >= 1 for t in cnn_tasks)
    conv = next(t for t in cnn_tasks if t.name == "fused_conv2d_add_relu")
    assert conv.desc.shapes[:2] == ((1, 16, 16, 3), (3, 3, 3, 16))  # NHWC data, HWIO weights
    assert set(conv.desc.dtypes) == {"float32"}
    assert len({t.key for t in cnn_tasks}) == len(cnn_tasks)


@pytest.mark.tvm
def test_task_key_is_metaschedules_workload_hash(cnn_tasks):
    from tvm.s_tir import meta_schedule as ms

    for task in cnn_tasks:
        assert ms.database.Workload(task.mod).as_json()[0] == task.key.shash


@pytest.mark.tvm
def test_prepare_is_idempotent_and_target_checked(fe, cnn_prepared, cnn_tasks, target):
    assert fe.is_prepared(cnn_prepared)
    assert fe.prepare_for_tuning(cnn_prepared, target) is cnn_prepared
    with pytest.raises(TargetError, match="prepared for a llvm target"):
        fe.build(cnn_prepared, "nvidia/nvidia-a100")


def _recording_database():
    import tvm_ffi
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class Recording(ms.database.PyDatabase):
        def __init__(self):
            super().__init__()
            self.asked: set[str] = set()

        def has_workload(self, mod):
            self.asked.add(str(tvm_ffi.structural_hash(mod)))
            return False

        def commit_workload(self, mod):
            self.asked.add(str(tvm_ffi.structural_hash(mod)))
            return ms.database.Workload(mod)

        def commit_tuning_record(self, record):
            pass

        def get_top_k(self, workload, top_k):
            return []

        def get_all_tuning_records(self):
            return []

        def __len__(self):
            return 0

    return Recording()


@pytest.mark.tvm
def test_database_is_asked_for_exactly_the_extracted_tasks(fe, cnn_prepared, cnn_tasks, target):
    db = _recording_database()
    fe.build(cnn_prepared, target, database=db)
    assert db.asked == {t.key.shash for t in cnn_tasks}


@pytest.mark.tvm
def test_database_record_is_applied(fe, tvm, cnn, cnn_imported, cnn_prepared, cnn_tasks, target):
    from tvm import relax
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    task = next(t for t in cnn_tasks if t.desc.family == "matmul")
    sch = Schedule(task.mod)
    loops = sch.get_loops(sch.get_sblock("matmul"))
    _, inner = sch.split(loops[-1], [None, 64])
    sch.unroll(inner)
    db = ms.database.MemoryDatabase()
    workload = db.commit_workload(task.mod)
    args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-4], target, args))

    with target, db, tvm.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase()(cnn_prepared)
    scheduled = {t.name for t in cnn_tasks if "tirx.is_scheduled" in (applied[t.name].attrs or {})}
    assert scheduled == {task.name}

    ex = fe.build(cnn_prepared, target, database=db)
    (x,) = cnn.example_inputs
    torch.testing.assert_close(fe.run(ex, cnn_imported, x), cnn.module(x), rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_cpu_kernels_may_re_lay_out_weights_and_the_build_folds_it(fe, tvm, cnn, cnn_imported, cnn_prepared,
                                                                    cnn_tasks, target):
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    # Constant arguments (weights, folded batch-norm terms) are marked; the input is not; task
    # names are the fused kernels' own (TVM's AttachAttrLayoutFreeBuffers would rename them).
    free = {t.name: list((t.mod["main"].attrs or {}).get("layout_free_buffers", [])) for t in cnn_tasks}
    assert free["fused_conv2d_add_relu"] == [1, 2] and free["transpose"] == []
    task = next(t for t in cnn_tasks if t.desc.family == "matmul")
    assert free[task.name] and 0 not in free[task.name]
    # A record whose program reads the weight in another layout (MetaSchedule's RewriteLayout
    # postprocessor, as tuning applies it): the build splits the re-layout off and folds it
    # into the constant weight, and the model still computes the same.
    sch = Schedule(task.mod)
    loops = sch.get_loops(sch.get_sblock("matmul"))
    sch.split(loops[-1], [None, 16])
    sch.enter_postproc()
    rewrite = ms.postproc.RewriteLayout()
    rewrite._initialize_with_tune_context(ms.TuneContext(mod=task.mod, target=target))
    assert rewrite.apply(sch)
    assert any(inst.kind.name == "TransformLayout" for inst in sch.trace.insts)
    db = ms.database.MemoryDatabase()
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(task.mod), [1e-4], target, args))
    ex = fe.build(cnn_prepared, target, database=db)
    calls = [line.split()[1] for line in ex.as_text().splitlines() if line.strip().startswith("call ")]
    assert f"{task.name}_prepacked" in calls and task.name not in calls  # no per-call re-layout
    (x,) = cnn.example_inputs
    torch.testing.assert_close(fe.run(ex, cnn_imported, x), cnn.module(x), rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_cuda_target_without_a_gpu_prepares_extracts_and_builds(fe, cnn_imported, cnn_tasks):
    # No GPU is needed to compile for one; DLight schedules the kernels no record covers.
    prepared = fe.prepare_for_tuning(cnn_imported, "nvidia/nvidia-a100")
    tasks = fe.extract_tasks(prepared, "nvidia/nvidia-a100")
    # The same kernels, but convolutions stay NCHW on CUDA (frontend.CONV_LAYOUTS is per target
    # kind): same task names bar the CPU's layout transposes, different conv workloads.
    assert {t.name for t in tasks} == {t.name for t in cnn_tasks if "transpose" not in t.name} | {"reshape2"}
    conv = next(t for t in tasks if t.name == "fused_conv2d_add_relu")
    assert conv.desc.shapes[:2] == ((1, 3, 16, 16), (16, 3, 3, 3))
    assert "layout_free_buffers" not in (conv.mod["main"].attrs or {})  # weight prepacking is CPU-only
    ex = fe.build(prepared, "nvidia/nvidia-a100")
    assert ex is not None


# --- family guess -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shapes", "family"),
    [
        ("fused_conv2d1_add_relu", [(1, 64, 56, 56), (64, 64, 3, 3)], "conv2d"),
        ("conv2d10", [(1, 256, 14, 14), (512, 256, 1, 1)], "conv2d"),
        ("fused_conv2d3_subtract_divide", [(1, 96, 56, 56), (96, 1, 3, 3)], "depthwise_conv2d"),
        ("fused_conv2d_transpose_add", [(1, 8, 8, 8), (8, 4, 2, 2)], "other"),
        ("fused_matmul_add1", [(1, 128, 768), (768, 768)], "matmul"),
        ("matmul1", [(1, 12, 128, 64), (1, 12, 64, 128)], "batch_matmul"),
        ("batch_matmul", [(4, 8, 8), (4, 8, 8)], "batch_matmul"),
        ("dense3", [(1, 512), (10, 512)], "dense"),
        ("fused_reshape1_add", [(1, 128, 768)], "other"),
        ("layer_norm", [], "other"),
        ("max_pool2d", [], "other"),
    ],
)
def test_guess_family(fe, name, shapes, family):
    assert fe.guess_family(name, shapes) == family


# --- zoo ---------------------------------------------------------------------------------------


def test_zoo_registry():
    assert zoo.names() == ("bert_base", "gpt2_small", "llama_small", "mobilenet_v2", "resnet18", "resnet50",
                           "small_cnn", "vgg16", "vit_b16")
    with pytest.raises(UnsupportedModelError, match="resnet18"):
        zoo.get("resnet19")
    with pytest.raises(UnsupportedModelError, match="takes batch"):
        zoo.get("resnet18", depth=34)
    assert "seq_len=128" in zoo.describe("bert_base")


@pytest.mark.parametrize(("params", "says"), [
    ({"seq_len": "abc"}, "seq_len takes a positive integer (default 128), got 'abc'"),
    ({"seq_len": 0}, "seq_len takes a positive integer"),  # TVM's reshape of an empty tensor, before
    ({"batch": -1}, "batch takes a positive integer"),  # "fix its factory" and a torch error, before
    ({"num_layers": 1.5}, "num_layers takes a positive integer"),
])
def test_a_zoo_parameter_of_the_wrong_kind_is_named_with_its_default(params, says):
    with pytest.raises(UnsupportedModelError, match=re.escape(says)):
        zoo.get("bert_base", **params)


def test_zoo_parameters_from_the_command_line_take_their_defaults_kinds():
    from tunecache.models import load_model_spec

    with pytest.raises(UnsupportedModelError, match=r"width_mult takes a positive number \(default 1.0\), got 'x'"):
        load_model_spec("mobilenet_v2:width_mult=x")
    with pytest.raises(UnsupportedModelError, match="batch_norm takes true or false"):
        load_model_spec("vgg16:batch_norm=maybe")
    _, inputs, name = load_model_spec("small_cnn:batch=2,num_classes=4")
    assert name == "small_cnn(batch=2, num_classes=4)" and tuple(inputs[0].shape) == (2, 3, 16, 16)
    for word, flag in (("yes", True), ("FALSE", False), ("1", True)):
        assert zoo._checked_param("vgg16", "batch_norm", word, False) is flag


def test_zoo_models_are_seeded_eval_and_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b = zoo.get("small_cnn"), zoo.get("small_cnn")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not a.module.training
    torch.testing.assert_close(a.module(*a.example_inputs), b.module(*b.example_inputs))
    c = zoo.get("small_cnn", seed=1)
    assert not torch.equal(a.module.conv1.weight, c.module.conv1.weight)


@pytest.mark.parametrize(
    ("name", "params", "out_shape"),
    [
        ("bert_base", {"seq_len": 16, "num_layers": 1}, (1, 16, 768)),
        ("mobilenet_v2", {"image_size": 64}, (1, 1000)),
        ("resnet18", {"image_size": 64, "batch": 2}, (2, 1000)),
        ("resnet50", {"image_size": 64}, (1, 1000)),
        ("llama_small", {"seq_len": 16, "num_layers": 1}, (1, 16, 4096)),
    ],
)
def test_zoo_models_run_in_pytorch(name, params, out_shape):
    m = zoo.get(name, **params)
    with torch.no_grad():
        out = m.module(*m.example_inputs)
    assert tuple(out.shape) == out_shape
    assert torch.isfinite(out).all()
    assert "=" in m.name  # parameters are part of the name


def _zoo_tasks(fe, target, name, **params):
    m = zoo.get(name, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imported = fe.import_model(m.module, m.example_inputs)
    return fe.extract_tasks(fe.prepare_for_tuning(imported, target), target)


@pytest.mark.tvm
def test_bert_layer_tasks(fe, target):
    tasks = _zoo_tasks(fe, target, "bert_base", num_layers=1)
    families = collections.Counter(t.desc.family for t in tasks)
    assert families["matmul"] == 3  # QKV/output projections (768x768), FFN up, FFN down
    assert families["batch_matmul"] == 2  # scores and context
    assert sum(t.weight for t in tasks if t.desc.family == "matmul") == 6


@pytest.mark.tvm
def test_resnet18_tasks(fe, target):
    tasks = _zoo_tasks(fe, target, "resnet18")
    families = collections.Counter(t.desc.family for t in tasks)
    # Batch norm is decomposed and fused into its convolution: 18 conv2d tasks (11 conv shapes,
    # some with several epilogues); 28 tasks without DecomposeOpsForInference. Convolutions run
    # in NHWC on CPU: the input's transpose is a task, the one before the classifier is fused
    # with the flatten.
    assert len(tasks) == 23
    assert families == {"conv2d": 18, "matmul": 1, "other": 4}
    convs = [t for t in tasks if t.desc.family == "conv2d"]
    assert len({t.desc.shapes[:2] for t in convs}) == 11
    assert [t.desc.shapes[:2] for t in convs if t.desc.shapes[0][-1] == 3] == [((1, 224, 224, 3), (7, 7, 3, 64))]


@pytest.mark.tvm
def test_conv_layout_is_kept_where_converting_would_transpose_every_layer(fe, target):
    """An operator the layout conversion has no rule for (``softplus``) would get a transpose on
    each side at every layer; such a model keeps NCHW. ReLU6 (``clip``) and LeakyReLU have no
    rule either but are rewritten with ``maximum``/``minimum`` first, so their models run NHWC.
    Every one computes what PyTorch computes."""
    torch.manual_seed(0)

    def cnn(act: type[torch.nn.Module], **kw: float) -> torch.nn.Module:
        layers = [torch.nn.Conv2d(3, 8, 3, padding=1), act(**kw)]
        for _ in range(3):
            layers += [torch.nn.Conv2d(8, 8, 3, padding=1), act(**kw)]
        return torch.nn.Sequential(*layers).eval()

    x = torch.randn(1, 3, 12, 12)
    layouts = {}
    models = {"relu6": cnn(torch.nn.ReLU6), "leaky": cnn(torch.nn.LeakyReLU, negative_slope=0.1),
              "relu": cnn(torch.nn.ReLU), "softplus": cnn(torch.nn.Softplus)}
    for name, model in models.items():
        imported = fe.import_model(model, (x,))
        prepared = fe.prepare_for_tuning(imported, target)
        convs = [t for t in fe.extract_tasks(prepared, target) if t.desc.family == "conv2d"]
        layouts[name] = {"NHWC" if t.desc.shapes[0][1] == 12 else "NCHW" for t in convs}  # H second: NHWC
        got = fe.run(fe.build(prepared, target), imported, x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
    assert layouts == {"relu6": {"NHWC"}, "leaky": {"NHWC"}, "relu": {"NHWC"}, "softplus": {"NCHW"}}


@pytest.mark.tvm
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "n_tasks", "families"),
    [
        ("resnet50", 33, {"conv2d": 28, "matmul": 1, "other": 4}),
        ("mobilenet_v2", 34, {"conv2d": 20, "depthwise_conv2d": 10, "matmul": 1, "other": 3}),
    ],
)
def test_cnn_zoo_tasks(fe, target, name, n_tasks, families):
    tasks = _zoo_tasks(fe, target, name)
    assert len(tasks) == n_tasks
    assert collections.Counter(t.desc.family for t in tasks) == families


@pytest.mark.tvm
@pytest.mark.slow
def test_bert_base_tasks_dedupe_across_layers(fe, target):
    full = _zoo_tasks(fe, target, "bert_base")
    two = _zoo_tasks(fe, target, "bert_base", num_layers=2)
    assert len(full) == 18
    assert {t.key for t in full} == {t.key for t in two}
    by_key = {t.key: t.weight for t in full}
    assert sum(by_key[t.key] for t in two if t.desc.family == "matmul") == 6 * 12


@pytest.mark.tvm
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_cpu_gelu_uses_fast_math_and_matches_pytorch(fe, target, approximate):
    """GELU on CPU is written with TVM's fast erf/tanh (the C library's scalar erff per element
    took a quarter of BERT's time), and stays within float32 rounding of PyTorch's."""
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(approximate=approximate)).eval()
    x = torch.randn(8, 16) * 3
    imported = fe.import_model(m, (x,))
    prepared = fe.prepare_for_tuning(imported, target)
    text = prepared.script()
    assert "fast_erf" in text or "fast_tanh" in text
    assert "T.erf(" not in text and "T.tanh(" not in text
    got = fe.run(fe.build(prepared, target), imported, x)
    torch.testing.assert_close(got, m(x), rtol=1e-5, atol=2e-6)


@pytest.mark.tvm
def test_cpu_matmul_by_a_constant_with_awkward_columns_is_padded(fe, target):
    """A linear layer of 250 outputs (no 8-lane vector divides it) computes 256 columns of a
    zero-padded weight and slices them; one of 1000 outputs (a multiple of 8) and a product of two
    activations are left as they are, and each model computes what PyTorch computes."""
    from tunecache.tvm_layer.frontend.prepare import padded_columns

    assert [padded_columns(n) for n in (250, 1000, 37, 50257, 50265, 30522)] == [256, 1000, 37, 50304, 50304, 30528]

    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(32, 250)
            self.wide = torch.nn.Linear(32, 1000)

        def forward(self, x):
            gram = x @ x.transpose(-1, -2)[..., :25]  # activations by activations: not a weight
            return torch.relu(self.head(x)), self.wide(x), gram

    torch.manual_seed(0)
    m = Mixed().eval()
    x = torch.randn(1, 25, 32)
    imported = fe.import_model(m, (x,))
    prepared = fe.prepare_for_tuning(imported, target)
    matmuls = [t.desc.shapes for t in fe.extract_tasks(prepared, target) if t.desc.family == "matmul"]
    columns = sorted(shapes[1][-1] for shapes in matmuls)
    assert columns == [25, 256, 1000], matmuls
    assert any("250 columns computes 256" in n for n in fe.preparation_notes(prepared)), fe.preparation_notes(prepared)
    got = fe.run(fe.build(prepared, target), imported, x)
    for g, want in zip(got, m(x), strict=True):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5)


# --- PyTorch semantics, stage errors, degraded kernels (issue 23) --------------------------------


class _CatEmpty(torch.nn.Module):
    """Concatenates an empty 1-D placeholder with a 3-D tensor, as transformers' DynamicCache does."""

    def forward(self, x):
        cache = torch.cat([torch.zeros(0), x * 2], dim=-2)  # PyTorch skips the empty 1-D operand
        return cache + 1


@pytest.mark.tvm
def test_cat_skips_empty_1d_operands_as_pytorch_does(fe, target):
    x = torch.randn(1, 4, 8)
    imported = fe.import_model(_CatEmpty(), (x,))
    assert any("torch.cat" in n for n in imported.notes)
    prepared = fe.prepare_for_tuning(imported, target)
    assert any("torch.cat" in n for n in fe.preparation_notes(prepared))
    torch.testing.assert_close(fe.run(fe.build(prepared, target), imported, x), _CatEmpty()(x))


@pytest.mark.tvm
def test_import_failure_names_stage_operator_and_source_line(fe, monkeypatch):
    from tunecache.tvm_layer.frontend import fx_rewrites

    monkeypatch.setattr(fx_rewrites, "give_torch_semantics", lambda gm: [])  # TVM's importer as it is
    with pytest.raises(fe.ModelStageError) as info:
        fe.import_model(_CatEmpty(), (torch.randn(1, 4, 8),))
    err = info.value
    assert err.stage == "import" and err.operator == "aten.cat.default"
    assert err.source is not None and err.source.startswith("test_frontend.py:") and "torch.cat" in err.source
    assert "What to do:" in str(err) and "Concat expects" in str(err)
    assert isinstance(err, UnsupportedModelError) and err.__cause__ is not None  # nothing hidden


@pytest.mark.tvm
@pytest.mark.parametrize(
    "module",
    [
        pytest.param(lambda x: torch.cumsum(x > 0, dim=1) * 3, id="bool-cumsum-promotes-to-int64"),
        pytest.param(lambda x: x[:, [-1, 0, -2]] * 2, id="negative-index-wraps"),
    ],
)
def test_pytorch_semantics_tvm_lacks(fe, target, module):
    class M(torch.nn.Module):
        def forward(self, x):
            return module(x)

    x = torch.randn(2, 5)
    imported = fe.import_model(M(), (x,))
    assert imported.notes
    got = fe.run(fe.build(imported, target), imported, x)
    torch.testing.assert_close(got, M()(x))


@pytest.mark.tvm
def test_a_tvm_error_at_build_is_a_stage_error(fe, tvm, target):
    from tvm.script import relax as R

    @tvm.script.ir_module
    class BoolCumsum:  # LLVM cannot add bools: TVM's codegen fails
        @R.function
        def main(x: R.Tensor((1, 8), "bool")) -> R.Tensor((1, 8), "bool"):
            with R.dataflow():
                y = R.cumsum(x, axis=1)
                R.output(y)
            return y

    with pytest.raises(fe.ModelStageError, match="build failed") as info:
        fe.build(fe.import_model(BoolCumsum), target)
    assert info.value.stage == "build" and "What to do" in str(info.value)


@pytest.mark.tvm
def test_a_tunecache_bug_is_not_dressed_as_a_model_error(fe):
    from tunecache.tvm_layer.frontend.failures import stage

    with pytest.raises(ZeroDivisionError):
        with stage("prepare"):
            _ = 1 / 0


@pytest.mark.tvm
def test_layout_is_converted_only_where_there_are_convolutions(fe, target, monkeypatch):
    from tvm import relax

    def refuse(*args, **kwargs):
        raise AssertionError("ConvertLayout must not run on a model without conv2d")

    with monkeypatch.context() as m:
        m.setattr(relax.transform, "ConvertLayout", refuse)
        mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
        fe.prepare_for_tuning(fe.import_model(mlp, (torch.randn(2, 8),)), target)


@pytest.mark.tvm
def test_a_failed_layout_conversion_keeps_the_models_layout_with_a_note(fe, tvm, cnn, cnn_imported, target,
                                                                          monkeypatch):
    from tvm import relax

    def bad_alloc(*args, **kwargs):
        def run(mod):
            raise tvm.error.InternalError("std::bad_alloc")
        return run

    monkeypatch.setattr(relax.transform, "ConvertLayout", bad_alloc)
    prepared = fe.prepare_for_tuning(cnn_imported, target)
    notes = fe.preparation_notes(prepared)
    assert len(notes) == 1 and "bad_alloc" in notes[0] and "own layout" in notes[0]
    conv = next(t for t in fe.extract_tasks(prepared, target) if t.name == "fused_conv2d_add_relu")
    assert conv.desc.shapes[0] == (1, 3, 16, 16)  # NCHW, as the model has it
    (x,) = cnn.example_inputs
    torch.testing.assert_close(fe.run(fe.build(prepared, target), cnn_imported, x), cnn.module(x),
                               rtol=1e-4, atol=1e-5)


def _layout_rewrite_db(task, target):
    """A MetaSchedule database whose record for ``task`` re-lays its weight out (RewriteLayout)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    sch = Schedule(task.mod)
    sch.split(sch.get_loops(sch.get_sblock("matmul"))[-1], [None, 16])
    sch.enter_postproc()
    rewrite = ms.postproc.RewriteLayout()
    rewrite._initialize_with_tune_context(ms.TuneContext(mod=task.mod, target=target))
    assert rewrite.apply(sch)
    db = ms.database.MemoryDatabase()
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(task.mod), [1e-4], target, args))
    return db


@pytest.mark.tvm
def test_a_kernel_whose_prepack_cannot_be_split_is_degraded_not_the_model(fe, tvm, cnn, cnn_imported, cnn_prepared,
                                                                         cnn_tasks, target, monkeypatch):
    from tvm import relax

    task = next(t for t in cnn_tasks if t.desc.family == "matmul")
    db = _layout_rewrite_db(task, target)
    real = relax.transform.SplitLayoutRewritePreproc

    def failing_split():  # TVM refuses that kernel, alone or with the model around it
        def run(mod):
            if task.name in [gv.name_hint for gv in mod.get_global_vars()]:
                raise tvm.error.InternalError("Check failed: (current_subtree_ == -1) is false")
            return real()(mod)
        return run

    monkeypatch.setattr(relax.transform, "SplitLayoutRewritePreproc", failing_split)
    with fe.degraded_kernels() as degraded:
        ex = fe.build(cnn_prepared, target, database=db)
    assert list(degraded) == [task.name] and "current_subtree_" in degraded[task.name]
    calls = [line.split()[1] for line in ex.as_text().splitlines() if line.strip().startswith("call ")]
    assert task.name in calls and f"{task.name}_prepacked" not in calls  # its default schedule, no prepack
    (x,) = cnn.example_inputs
    torch.testing.assert_close(fe.run(ex, cnn_imported, x), cnn.module(x), rtol=1e-4, atol=1e-5)


def test_report_shows_degraded_kernels_and_model_notes():
    from tunecache.report import CompileReport, TaskReport

    rep = CompileReport(tasks=(TaskReport("k", "w:1", "matmul", ((2, 2),), 1, "hit", latency_s=1e-3),
                               TaskReport("j", "w:2", "other", ((2,),), 1, "fallback")))
    out = rep.annotate(["import: dropped 1 cat"], {"k": "degraded: why"})
    assert [(t.name, t.outcome, t.note, t.latency_s) for t in out.tasks][0] == ("k", "fallback", "degraded: why", None)
    assert "note: import: dropped 1 cat" in str(out)
    assert json.loads(out.to_json())["notes"] == ["import: dropped 1 cat"]


@pytest.mark.tvm
def test_onnx_shape_arithmetic_is_folded_for_static_inputs(fe, target, tmp_path):
    class Flatten(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.pad(x.view(x.shape[0], x.shape[1], -1), (0, x.shape[2] % 3)) * 2

    x = torch.randn(2, 3, 4, 4)
    path = tmp_path / "flatten.onnx"
    torch.onnx.export(Flatten(), (x,), str(path), dynamo=False, opset_version=17,
                      dynamic_axes={"x": {0: "batch"}}, input_names=["x"])
    imported = fe.import_model(str(path), (x.numpy(),))
    assert any("folded to constants" in n for n in imported.notes)
    np.testing.assert_allclose(fe.run(fe.build(imported, target), imported, x.numpy()), Flatten()(x).numpy())


# --- the decoder LM of the zoo -------------------------------------------------------------------

_TINY_LLAMA = dict(seq_len=8, num_layers=1, hidden=32, heads=4, kv_heads=2, intermediate=64, vocab=64)


@pytest.mark.tvm
def test_llama_small_tasks(fe, target):
    tasks = _zoo_tasks(fe, target, "llama_small", **_TINY_LLAMA)
    families = collections.Counter(t.desc.family for t in tasks)
    assert families["matmul"] == 4  # q and o, k and v (grouped-query: narrower), gate and up, down
    assert sum(t.weight for t in tasks if t.desc.family == "batch_matmul") == 2  # scores and context
    shapes = {t.desc.shapes[:2]: t.weight for t in tasks if t.desc.family == "matmul"}
    assert shapes[((8, 32), (32, 16))] == 2  # k and v projections: 2 key/value heads of 8


@pytest.mark.tvm
def test_llama_small_tunes_lands_in_the_store_and_hits_on_the_second_compile(tmp_path):
    import tunecache

    zm = zoo.get("llama_small", **_TINY_LLAMA)
    db = str(tmp_path / "tc.db")
    first = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, trials_per_task=2, seed=3,
                              progress=False, library_cache=False)
    tuned = {t.name for t in first.report.tasks if t.outcome == "tuned"}
    # every task but the embedding gather (random indices out of bounds: no candidate runs) tunes
    assert len(tuned) >= len(first.report.tasks) - 1 and first.report.trials > 0
    with torch.no_grad():
        want = zm.module(*zm.example_inputs)
    torch.testing.assert_close(first(*zm.example_inputs), want, rtol=1e-4, atol=1e-5)
    from tunecache.store import open_store

    assert open_store(db).count_records() >= len(tuned)
    second = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, trials_per_task=2,
                               progress=False, library_cache=False)
    assert second.report.trials == 0
    assert {t.name for t in second.report.tasks if t.outcome == "hit"} >= tuned
    torch.testing.assert_close(second(*zm.example_inputs), want, rtol=1e-4, atol=1e-5)


@pytest.mark.tvm
def test_a_kernel_whose_record_does_not_build_is_degraded_not_the_model(fe, tvm, cnn, cnn_imported, cnn_prepared,
                                                                        cnn_tasks, target, monkeypatch):
    task = next(t for t in cnn_tasks if t.desc.family == "matmul")
    db = _layout_rewrite_db(task, target)
    real_compile, real_build = tvm.compile, tvm.tirx.build

    def scheduled(mod):
        return [gv.name_hint for gv, f in mod.functions_items()
                if "tirx.is_scheduled" in (getattr(f, "attrs", None) or {})]

    def compile_fails_with_the_record(mod, *args, **kwargs):
        if scheduled(mod):  # LLVM rejecting the scheduled kernel, as it would a bad program
            raise tvm.error.InternalError("LLVM module verification failed")
        return real_compile(mod, *args, **kwargs)

    def build_fails_with_the_record(mod, *args, **kwargs):
        if scheduled(mod):
            raise tvm.error.InternalError("LLVM module verification failed")
        return real_build(mod, *args, **kwargs)

    monkeypatch.setattr(tvm, "compile", compile_fails_with_the_record)
    monkeypatch.setattr(tvm.tirx, "build", build_fails_with_the_record)
    with fe.degraded_kernels() as degraded:
        ex = fe.build(cnn_prepared, target, database=db)
    assert list(degraded) == [task.name] and "does not build" in degraded[task.name]
    (x,) = cnn.example_inputs
    torch.testing.assert_close(fe.run(ex, cnn_imported, x), cnn.module(x), rtol=1e-4, atol=1e-5)
