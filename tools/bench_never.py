"""End to end before any tuning: ``tune="never"`` on an empty store against PyTorch eager and ONNX Runtime.

    python tools/bench_never.py [--models resnet18 hf:gpt2:layers=4 ...] [--rounds 5] [--untuned-rounds 1]
                                [--json out.json] [--plot out.png]

Models are zoo names (``resnet18``, ``bert_base:num_layers=2``, random weights) or ``transformers``
architectures built from their configs with random weights, nothing downloaded:
``hf:NAME[:key=value,...]`` with NAME one of ``gpt2``, ``llama``, ``roberta``, ``distilbert``,
``vit``, ``bart_encoder``, ``resnet50``, ``mobilenet_v2`` and keys ``layers``, ``seq`` (tokens),
``image`` (pixels), ``hidden`` (see ``HF``; batch 1 always). Each is wrapped to return its first
output and run in eval mode under ``torch.no_grad``. Arms, all in this process:

* ``eager``: the PyTorch module itself (``torch.get_num_threads()`` threads; ``--threads N`` sets
  every arm's thread count: on a shared machine one thread each is far less sensitive to load);
* ``ort``: the module exported with ``torch.onnx.export(dynamo=False)`` (the TorchScript exporter:
  torch 2.13's dynamo exporter needs ``onnxscript``) and run by ONNX Runtime's
  ``CPUExecutionProvider`` with default session options (intra-op threads = physical cores). A
  model whose export fails with SDPA's grouped-query heads is exported again from a copy using
  transformers' eager attention (noted); any other failure is recorded in the arm, not raised;
* ``predicted``: ``tunecache.compile(tune="never")`` on an empty in-memory store
  (every task without a stored program gets the zero-measurement rung, ``tunecache.search.predict``);
* ``untuned``: the same compile with the rung switched off, so every task gets TVM's default
  schedule (what tunecache served before issue 24). It is 100-600x slower than eager on a CPU:
  ``--untuned-rounds N`` times it in the first N rounds only (0: compiled, never run);
  ``--no-untuned`` skips it;
* compile time is also taken for a plain untuned ``tvm.compile`` (export + import + TVM's default
  pipeline, weights bound; ``--no-tvm-baseline`` skips it): the issue's goal compares to that.
  Each compile is timed twice: until it returns (``compile_s``) and until a Relax VM for it exists
  (``ready_s``): ``tvm.compile`` leaves the machine code of its kernels to the VM's creation,
  tunecache's build generates it on every core before it returns, so ``ready_s`` is the fair one.

Compiles run after a warm-up compile of a tiny model, in the order predicted, untuned, plain
``tvm.compile``: the first compile of a module also pays ``torch.export``'s per-module caches, so
the order is conservative for the predicted arm. Latency is timed in interleaved rounds after one
correctness call per arm: in each round, each arm in turn gets a ``--gap`` sleep, one untimed
settle call (not for ``untuned``) and one timed call. Each runtime's worker threads spin after a
call, and on a small machine a call right after another runtime's call was 10-300x slower (measured
on 2 cores); the gap and the settle call time each arm with only its own threads awake. Each figure
is the median of its rounds (min and max are kept, and the runnable-thread count at each timed
call: the machine may be shared). ``--profile`` (default on) times each kernel of one predicted
call through the Relax VM's instrument hook and joins it with the compile report (which rung served
the task). Prints JSON: the CPU, cores, threads, the load average before and after each model and
the run, and per model the medians (ms), ratios to eager, compile times and their ratios, the task
outcomes (with each fallback task's name and reason) and the relative error of each arm.
Nothing is tuned or measured by tunecache.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_coverage import _wrap  # noqa: E402 - a transformers model called with positional inputs

DEFAULT_MODELS = ["small_cnn", "resnet18", "mobilenet_v2", "bert_base:num_layers=2", "hf:gpt2", "hf:llama",
                  "hf:roberta", "hf:distilbert", "hf:vit", "hf:bart_encoder"]
ARMS = ("eager", "ort", "predicted", "untuned")


# ---------------------------------------------------------------------------------------------
# transformers models from their configs
# ---------------------------------------------------------------------------------------------


def _ids(vocab: int, seq: int) -> Any:
    import torch

    return torch.randint(3, vocab, (1, seq), dtype=torch.int64, generator=torch.Generator().manual_seed(seq))


def _text(cls: str, cfg: str, layers_key: str, **fixed: Any) -> Callable[[dict[str, int]], tuple[Any, Any]]:
    def make(p: dict[str, int]) -> tuple[Any, Any]:
        import transformers

        config = getattr(transformers, cfg)(**{layers_key: p["layers"]}, **fixed)
        model = getattr(transformers, cls)(config).eval()
        return _wrap(model, ("input_ids",)), (_ids(config.vocab_size, p["seq"]),)

    return make


def _llama(p: dict[str, int]) -> tuple[Any, Any]:
    import transformers

    h = p["hidden"]
    config = transformers.LlamaConfig(hidden_size=h, intermediate_size=(h * 11 // 4 + 255) // 256 * 256,
                                      num_hidden_layers=p["layers"], num_attention_heads=h // 64,
                                      num_key_value_heads=max(1, h // 256), vocab_size=32000)
    return _wrap(transformers.LlamaModel(config).eval(), ("input_ids",)), (_ids(32000, p["seq"]),)


def _bart_encoder(p: dict[str, int]) -> tuple[Any, Any]:
    import transformers

    # facebook/bart-base's dimensions
    config = transformers.BartConfig(d_model=768, encoder_layers=p["layers"], decoder_layers=1,
                                     encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                                     decoder_ffn_dim=3072)
    enc = transformers.BartModel(config).eval().get_encoder()
    return _wrap(enc, ("input_ids",)), (_ids(config.vocab_size, p["seq"]),)


def _image(cls: str, cfg: str, layers_key: str | None = None, **fixed: Any) -> Callable[[dict[str, int]],
                                                                                        tuple[Any, Any]]:
    def make(p: dict[str, int]) -> tuple[Any, Any]:
        import torch
        import transformers

        kw = dict(fixed, image_size=p["image"]) if "image_size" in fixed else dict(fixed)
        if layers_key:
            kw[layers_key] = p["layers"]
        model = getattr(transformers, cls)(getattr(transformers, cfg)(**kw)).eval()
        _randomize_norms(model)
        x = torch.randn(1, 3, p["image"], p["image"], generator=torch.Generator().manual_seed(0))
        return _wrap(model, ("pixel_values",)), (x,)

    return make


def _randomize_norms(model: Any) -> None:
    """Non-trivial batch-norm statistics (transformers initialises some scales near zero)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            with torch.no_grad():
                m.running_mean.normal_(0.0, 0.1, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)
                if m.weight is not None:
                    m.weight.uniform_(0.5, 1.5, generator=gen)
                    m.bias.normal_(0.0, 0.1, generator=gen)


#: name -> (factory, default parameters). Dimensions are the released models' unless a key sets them.
HF: dict[str, tuple[Callable[[dict[str, int]], tuple[Any, Any]], dict[str, int]]] = {
    "gpt2": (_text("GPT2Model", "GPT2Config", "n_layer"), {"layers": 4, "seq": 64}),
    "llama": (_llama, {"layers": 2, "seq": 64, "hidden": 1024}),
    "roberta": (_text("RobertaModel", "RobertaConfig", "num_hidden_layers", pad_token_id=1),
                {"layers": 4, "seq": 64}),
    "distilbert": (_text("DistilBertModel", "DistilBertConfig", "n_layers"), {"layers": 6, "seq": 64}),
    "vit": (_image("ViTModel", "ViTConfig", "num_hidden_layers", image_size=224, patch_size=16),
            {"layers": 4, "image": 224}),
    "bart_encoder": (_bart_encoder, {"layers": 2, "seq": 64}),
    "resnet50": (_image("ResNetModel", "ResNetConfig"), {"image": 224}),
    "mobilenet_v2": (_image("MobileNetV2Model", "MobileNetV2Config", image_size=224), {"image": 224}),
}


def load(spec: str) -> tuple[Any, tuple[Any, ...], str]:
    """``(module, example inputs, name)`` for a zoo spec or an ``hf:NAME[:k=v,...]`` spec."""
    import torch

    torch.manual_seed(0)
    if not spec.startswith("hf:"):
        from tunecache.models import load_model_spec

        module, inputs, name = load_model_spec(spec)
        return module.eval(), tuple(inputs), name
    name, _, rest = spec[3:].partition(":")
    if name not in HF:
        raise SystemExit(f"unknown transformers model {name!r}; choose from {', '.join(HF)}")
    factory, params = HF[name]
    params = dict(params)
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        if k not in params:
            raise SystemExit(f"hf:{name} takes {', '.join(params)}, not {k!r}")
        params[k] = int(v)
    module, inputs = factory(params)
    return module, tuple(inputs), f"{name}(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")"


# ---------------------------------------------------------------------------------------------
# The arms
# ---------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The host CPU's model name, as the store's host fingerprint reads it."""
    from tunecache.tvm_layer.target import host_fingerprint

    return host_fingerprint().cpu_model or "unknown"


def compile_arm(module: Any, inputs: Any, predicted: bool) -> tuple[Any, float, float]:
    """One ``tune="never"`` compile into an empty store, the predicted rung on or off:
    ``(compiled model, compile seconds, seconds until a VM is ready to run it)``. A VM's
    creation compiles whatever machine code the build left to its first use."""
    import tunecache
    from tunecache.search import predict
    from tunecache.tvm_layer import frontend

    real = predict.predict_task
    if not predicted:
        predict.predict_task = lambda *a, **k: "switched off for the untuned arm"  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cm = tunecache.compile(module, example_inputs=inputs, store="memory", tune="never", progress=False,
                                   library_cache=False)
        t1 = time.perf_counter()
        frontend.make_vm(cm.executable)
        return cm, t1 - t0, time.perf_counter() - t0
    finally:
        predict.predict_task = real  # type: ignore[assignment]


def tvm_baseline(module: Any, inputs: Any) -> dict[str, Any]:
    """Export + import the module, then an untuned ``tvm.compile`` of its Relax module (weights
    bound), then a Relax VM for it (``ready_s``: TVM compiles the machine code of its kernels when
    the VM looks them up)."""
    from tunecache.tvm_layer import frontend, load_tvm
    from tunecache.tvm_layer.frontend.prepare import _bind
    from tunecache.tvm_layer.target import resolve_target

    tvm = load_tvm()
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imported = frontend.import_model(module, inputs)
            t1 = time.perf_counter()
            ex = tvm.compile(_bind(imported.mod, imported.params), target=resolve_target(None))
        t2 = time.perf_counter()
        frontend.make_vm(ex)
        t3 = time.perf_counter()
    except Exception as err:  # noqa: BLE001 - the baseline's own failures are data
        return {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    return {"import_s": round(t1 - t0, 2), "tvm_compile_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2),
            "ready_s": round(t3 - t0, 2)}


@contextlib.contextmanager
def _quiet_fd2() -> Any:
    """Send file descriptor 2 to /dev/null meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(null)
        os.close(saved)


def ort_arm(module: Any, inputs: tuple[Any, ...], tmp: str,
            threads: int = 0) -> tuple[Callable[[], Any] | None, dict[str, Any]]:
    """Export to ONNX and open an ONNX Runtime CPU session (default options; ``threads`` intra-op
    threads if set); ``(call, info)``, call ``None`` on failure."""
    import torch

    try:
        import onnxruntime as ort
    except ImportError as err:
        return None, {"error": f"onnxruntime is not installed ({err}): pip install -e '.[bench]'"}
    info: dict[str, Any] = {"onnxruntime": ort.__version__}
    path = os.path.join(tmp, "model.onnx")
    names = [f"in{i}" for i in range(len(inputs))]

    def export(m: Any) -> BaseException | None:
        try:  # the exporter prints the whole TorchScript graph to stderr (fd 2) when it fails
            with warnings.catch_warnings(), _quiet_fd2():
                warnings.simplefilter("ignore")
                torch.onnx.export(m, inputs, path, dynamo=False, opset_version=17, input_names=names)
        except Exception as err:  # noqa: BLE001 - torch's exporter fails in many ways; the arm records it
            return err
        return None

    t0 = time.perf_counter()
    err = export(module)
    inner = getattr(module, "model", None)
    if err is not None and hasattr(inner, "set_attn_implementation"):
        # The TorchScript exporter cannot convert SDPA with grouped-query heads (enable_gqa):
        # export a copy that uses transformers' eager attention (the same function).
        info["export_note"] = f"exported with eager attention after {type(err).__name__}: {str(err)[:200]}"
        twin = copy.deepcopy(module)
        twin.model.set_attn_implementation("eager")
        err = export(twin)
    info["export_s"] = round(time.perf_counter() - t0, 2)
    if err is not None:
        info["error"] = f"export: {type(err).__name__}: {str(err).strip()[:400]}"
        return None, info
    try:
        t0 = time.perf_counter()
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        info["session_s"] = round(time.perf_counter() - t0, 2)
    except Exception as err:  # noqa: BLE001 - as above
        info["error"] = f"session: {type(err).__name__}: {str(err).strip()[:400]}"
        return None, info
    feed_names = [i.name for i in sess.get_inputs()]
    arrays = [x.numpy() for x in inputs]
    feed = dict(zip(feed_names, arrays, strict=False))  # the exporter drops inputs the graph does not use
    return (lambda: sess.run(None, feed)[0]), info


def kernel_profile(cm: Any, inputs: tuple[Any, ...]) -> dict[str, float]:
    """Milliseconds per called function symbol over one call of ``cm``, through the VM's instrument hook."""
    from tunecache.tvm_layer.frontend import building

    vm = building.make_vm(cm.executable)
    spent: dict[str, float] = {}
    started: list[float] = []

    def instrument(func: Any, symbol: str, before: bool, ret: Any, *args: Any) -> int:
        if before:
            started.append(time.perf_counter())
        else:
            spent[symbol] = spent.get(symbol, 0.0) + (time.perf_counter() - started.pop()) * 1e3
        return 0

    vm.set_instrument(instrument)
    building.run(vm, cm.imported, *inputs)  # warm
    spent.clear()
    building.run(vm, cm.imported, *inputs)
    return spent


def _procs_running() -> int:
    """Runnable threads on the machine now (``/proc/loadavg``'s fourth field; this one included)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return -1


def wait_for_quiet(most_s: float, polls: int = 3) -> float:
    """Wait (at most ``most_s``) until no other thread was runnable at ``polls`` polls in a row, 1 s
    apart; return the seconds waited (the machine may be shared)."""
    t0 = time.time()
    quiet = 0
    while quiet < polls and time.time() - t0 < most_s:
        quiet = quiet + 1 if _procs_running() <= 1 else 0
        time.sleep(1.0)
    return round(time.time() - t0, 1)


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


def _rel_err(got: Any, want: Any) -> float:
    import numpy as np

    g = np.asarray(got.detach().numpy() if hasattr(got, "detach") else got, dtype="float64")
    w = np.asarray(want.detach().numpy(), dtype="float64")
    if g.shape != w.shape:
        return float("inf")
    return float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-30))


def _task_rows(cm: Any) -> list[dict[str, Any]]:
    return [{"name": t.name, "family": t.family, "weight": t.weight, "outcome": t.outcome,
             "shapes": [list(s) for s in t.shapes], "note": t.note[:300]} for t in cm.report.tasks]


# ---------------------------------------------------------------------------------------------
# One model
# ---------------------------------------------------------------------------------------------


def bench_model(spec: str, a: argparse.Namespace) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"model": spec, "load_before": [round(x, 2) for x in os.getloadavg()]}
    module, inputs, name = load(spec)
    out["name"] = name
    out["params_m"] = round(sum(p.numel() for p in module.parameters()) / 1e6, 2)
    calls: dict[str, Callable[[], Any]] = {}
    rounds = {arm: a.rounds for arm in ARMS}
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        want = _first(module(*inputs))
        calls["eager"] = lambda: module(*inputs)
        if not a.no_ort:
            fn, out["ort"] = ort_arm(module, inputs, tmp, a.threads)
            if fn is not None:
                calls["ort"] = fn
        compile_s: dict[str, float] = {}
        ready_s: dict[str, float] = {}
        cm, compile_s["predicted"], ready_s["predicted"] = compile_arm(module, inputs, True)
        calls["predicted"] = (lambda c: lambda: c(*inputs))(cm)
        rep = cm.report
        out["tasks"] = len(rep.tasks)
        out["outcomes"] = {o: rep.count(o) for o in ("predicted", "replayed", "fallback") if rep.count(o)}
        out["fallback_tasks"] = [{"name": t.name, "family": t.family, "shapes": [list(s) for s in t.shapes],
                                  "reason": t.note[:300]} for t in rep.tasks if t.outcome == "fallback"]
        out["predicted_tasks"] = _task_rows(cm)
        out["report_notes"] = list(rep.notes)
        if not a.no_untuned:
            ucm, compile_s["untuned"], ready_s["untuned"] = compile_arm(module, inputs, False)
            out["untuned_outcomes"] = {o: ucm.report.count(o) for o in ("predicted", "fallback") if ucm.report.count(o)}
            if a.untuned_rounds != 0:
                calls["untuned"] = (lambda c: lambda: c(*inputs))(ucm)
                if a.untuned_rounds > 0:
                    rounds["untuned"] = min(a.rounds, a.untuned_rounds)
        if not a.no_tvm_baseline:
            out["tvm_baseline"] = tvm_baseline(module, inputs)
            if "total_s" in out["tvm_baseline"]:
                compile_s["tvm_compile"] = out["tvm_baseline"]["total_s"]
                ready_s["tvm_compile"] = out["tvm_baseline"]["ready_s"]
                if a.compile_rounds > 1:
                    # one compile is one sample of a noisy quantity (a garbage collection inside
                    # torch.export alone moves small_cnn's by 0.25 s): more rounds, alternating
                    # which side goes first, the median of each side
                    samples = {"predicted": [(compile_s["predicted"], ready_s["predicted"])],
                               "tvm_compile": [(compile_s["tvm_compile"], ready_s["tvm_compile"])]}
                    for i in range(1, a.compile_rounds):
                        for side in (("tvm_compile", "predicted") if i % 2 else ("predicted", "tvm_compile")):
                            if side == "predicted":
                                _, c_s, r_s = compile_arm(module, inputs, True)
                            else:
                                base = tvm_baseline(module, inputs)
                                if "total_s" not in base:
                                    continue
                                c_s, r_s = base["total_s"], base["ready_s"]
                            samples[side].append((c_s, r_s))
                    out["compile_samples"] = {k: [[round(c, 2), round(r, 2)] for c, r in v]
                                              for k, v in samples.items()}
                    for side, got in samples.items():
                        compile_s[side] = statistics.median(c for c, _ in got)
                        ready_s[side] = statistics.median(r for _, r in got)
        out["compile_s"] = {k: round(v, 2) for k, v in compile_s.items()}
        out["ready_s"] = {k: round(v, 2) for k, v in ready_s.items()}
        if "tvm_compile" in ready_s:
            out["ready_ratio_predicted_vs_tvm_compile"] = round(ready_s["predicted"] / ready_s["tvm_compile"], 2)
        if "untuned" in compile_s:
            out["compile_ratio_predicted_vs_untuned"] = round(compile_s["predicted"] / compile_s["untuned"], 2)
        if "tvm_compile" in compile_s:
            out["compile_ratio_predicted_vs_tvm_compile"] = round(compile_s["predicted"] / compile_s["tvm_compile"],
                                                                  2)
        # one correctness call per arm: also each arm's warm-up
        out["rel_err"] = {}
        for arm, fn in list(calls.items()):
            if arm == "eager":
                fn()
                continue
            try:
                out["rel_err"][arm] = _rel_err(_first(fn()), want)
            except Exception as err:  # noqa: BLE001 - an arm failing to run is recorded
                out.setdefault("run_errors", {})[arm] = f"{type(err).__name__}: {str(err)[:300]}"
                del calls[arm]
        if a.quiet_wait > 0:
            out["quiet_wait_s"] = wait_for_quiet(a.quiet_wait)
        times: dict[str, list[float]] = {arm: [] for arm in calls}
        running: list[int] = []
        for r in range(a.rounds):
            for arm, fn in calls.items():
                if r >= rounds[arm]:
                    continue
                # Each runtime's worker threads spin for a while after a call (TVM's pool, ONNX
                # Runtime's, OpenMP's): on a 2-core machine a call right after another runtime's
                # ran 10-300x slower. A gap lets them sleep; the settle call wakes this arm's own.
                time.sleep(a.gap)
                if arm != "untuned":
                    fn()
                running.append(_procs_running())
                t0 = time.perf_counter()
                fn()
                times[arm].append(time.perf_counter() - t0)
        out["procs_running"] = {"median": statistics.median(running) if running else None,
                                "max": max(running, default=None)}
        if a.profile:
            try:
                per = kernel_profile(cm, inputs)
                by_task = {t.name: t for t in rep.tasks}
                total = sum(per.values())
                rows = []
                for sym, ms in sorted(per.items(), key=lambda kv: -kv[1]):
                    t = by_task.get(sym.removesuffix("_prepacked"))
                    rows.append({"kernel": sym, "ms": round(ms, 3), "share": round(ms / total, 3) if total else 0.0,
                                 "family": t.family if t else None, "outcome": t.outcome if t else None})
                out["predicted_profile"] = {"total_ms": round(total, 3), "kernels": rows[:25]}
            except Exception as err:  # noqa: BLE001 - the profile is optional
                out["predicted_profile"] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    med = {arm: statistics.median(v) * 1e3 for arm, v in times.items() if v}
    out["ms"] = {arm: round(v, 3) for arm, v in med.items()}
    out["samples"] = {arm: len(v) for arm, v in times.items()}
    out["min_ms"] = {arm: round(min(v) * 1e3, 3) for arm, v in times.items() if v}
    out["max_ms"] = {arm: round(max(v) * 1e3, 3) for arm, v in times.items() if v}
    out["vs_eager"] = {arm: round(med[arm] / med["eager"], 2) for arm in med if arm != "eager"}
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


# ---------------------------------------------------------------------------------------------
# Summary, plot, driver
# ---------------------------------------------------------------------------------------------


def summarize(models: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [m for m in models if "vs_eager" in m and "predicted" in m["vs_eager"]]
    pred = {m["model"]: m["vs_eager"]["predicted"] for m in ok}
    comp = {m["model"]: m.get("compile_ratio_predicted_vs_tvm_compile") for m in ok}
    comp_u = {m["model"]: m.get("compile_ratio_predicted_vs_untuned") for m in ok}
    ready = {m["model"]: m.get("ready_ratio_predicted_vs_tvm_compile") for m in ok}
    return {
        "predicted_vs_eager": pred,
        "predicted_vs_eager_median": statistics.median(pred.values()) if pred else None,
        "models_over_2x_eager": sorted(k for k, v in pred.items() if v > 2.0),
        "compile_ratio_vs_tvm_compile": comp,
        "compile_ratio_vs_untuned": comp_u,
        "ready_ratio_vs_tvm_compile": ready,
        "ready_ratio_vs_tvm_compile_median": statistics.median(v for v in ready.values() if v is not None)
        if any(v is not None for v in ready.values()) else None,
        "goals": {
            "latency_le_2x_eager_every_model": bool(pred) and all(v <= 2.0 for v in pred.values())
            and len(ok) == len(models),
            "compile_le_2x_tvm_compile_every_model": bool(comp) and all(v is not None and v <= 2.0
                                                                        for v in comp.values()),
            "ready_le_2x_tvm_compile_every_model": bool(ready) and all(v is not None and v <= 2.0
                                                                       for v in ready.values()),
            "compile_le_2x_untuned_every_model": bool(comp_u) and all(v is not None and v <= 2.0
                                                                      for v in comp_u.values()),
        },
    }


def plot(doc: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in doc["models"] if "vs_eager" in m]
    labels = [m["model"].removeprefix("hf:") for m in models]
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * len(models) + 2), 4.8))
    width = 0.27
    for i, (arm, color) in enumerate((("ort", "tab:green"), ("predicted", "tab:blue"), ("untuned", "tab:red"))):
        xs = [k + (i - 1) * width for k, m in enumerate(models) if arm in m["vs_eager"]]
        ys = [m["vs_eager"][arm] for m in models if arm in m["vs_eager"]]
        name = {"ort": "ONNX Runtime", "predicted": 'tunecache tune="never" (predicted)',
                "untuned": "TVM default schedule (untuned)"}[arm]
        ax.bar(xs, ys, width, label=name, color=color)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(2.0, color="gray", linestyle="--", linewidth=0.8, label="goal: 2x eager")
    ax.set_yscale("log")
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("latency / PyTorch eager (log)")
    load = f"load {doc['load_before'][0]:.1f} -> {doc['load_after'][0]:.1f}"
    ax.set_title(f"batch 1, median of {doc['rounds']} rounds, {doc['cpu']}, {doc['cores']} cores, {load}", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="transformers models: " + ", ".join(
                                     f"hf:{k} ({', '.join(f'{p}={v}' for p, v in d.items())})"
                                     for k, (_, d) in HF.items()))
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="zoo specs or hf:NAME[:k=v,...]")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per arm (default 5)")
    ap.add_argument("--untuned-rounds", type=int, default=-1,
                    help="time the untuned arm in this many rounds only (0: compile it, never run it; "
                         "default: --rounds)")
    ap.add_argument("--gap", type=float, default=0.2,
                    help="seconds of sleep before each arm's settle call and timed call (default 0.2)")
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before timing a model, wait up to this many seconds for no other runnable thread "
                         "on the machine (3 polls in a row; default 0: do not wait)")
    ap.add_argument("--compile-rounds", type=int, default=3,
                    help="compiles of the predicted arm and of the plain tvm.compile baseline, alternating; "
                         "their medians are the compile figures (default 3)")
    ap.add_argument("--no-untuned", action="store_true", help="skip the untuned arm altogether")
    ap.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime arm")
    ap.add_argument("--no-tvm-baseline", action="store_true", help="skip the plain tvm.compile compile-time baseline")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the per-kernel profile of the predicted arm")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for every arm (torch.set_num_threads, TVM_NUM_THREADS, ONNX Runtime's "
                         "intra-op threads); default 0: each runtime's default")
    ap.add_argument("--json", default="", help="also write the JSON here")
    ap.add_argument("--plot", default="", help="write a PNG of each arm's latency ratio to eager here")
    a = ap.parse_args(argv)
    if a.threads:
        os.environ["TVM_NUM_THREADS"] = str(a.threads)  # before TVM's thread pool starts
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    from tunecache.tvm_layer import load_tvm

    warnings.filterwarnings("ignore")
    load_tvm()
    from importlib.metadata import version

    doc: dict[str, Any] = {"command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
                           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_model(), "cores": os.cpu_count(),
                           "torch_threads": torch.get_num_threads(), "threads_option": a.threads,
                           "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"), "load_before": os.getloadavg(),
                           "rounds": a.rounds, "untuned_rounds": a.untuned_rounds, "compile_rounds": a.compile_rounds,
                           "versions": {}, "models": []}
    for pkg in ("torch", "transformers", "apache-tvm", "onnx", "onnxruntime"):
        try:
            doc["versions"][pkg] = version(pkg)
        except Exception:  # noqa: BLE001 - a missing package is reported as such
            doc["versions"][pkg] = "missing"
    # tvm's and tunecache's one-time initialisation, before anything is timed
    compile_arm(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(), (torch.randn(2, 4),), True)
    for spec in a.models:
        print(f"[bench_never] {spec}", file=sys.stderr, flush=True)
        t0 = time.time()
        try:
            row = bench_model(spec, a)
        except Exception as err:  # noqa: BLE001 - one model failing is recorded, the run goes on
            row = {"model": spec, "error": f"{type(err).__name__}: {str(err)[:500]}"}
        row["wall_s"] = round(time.time() - t0, 1)
        doc["models"].append(row)
        brief = {k: row.get(k) for k in ("model", "ms", "vs_eager", "compile_s", "ready_s", "outcomes", "error",
                                         "wall_s")}
        print(json.dumps(brief), file=sys.stderr, flush=True)
    doc["load_after"] = os.getloadavg()
    doc["summary"] = summarize(doc["models"])
    text = json.dumps(doc, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    if a.plot:
        plot(doc, a.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
