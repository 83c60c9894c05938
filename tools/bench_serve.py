"""Serve now, improve later (issue 20): background compile, worker, refresh, dynamic shapes.

A store is warmed once (``tunecache.warm``, ``--budget`` trials per full search; its wall time is
reported apart). Then, for the new model (``--new``), side by side in one process:

- ``untuned``: a plain untuned ``tvm.compile`` of the same model until a Relax VM is ready to run
  it (import, ``tvm.compile``, VM creation, which generates the machine code; ``bench_never``'s
  baseline), the reference of the compile-time goals; and tunecache's own bare untuned build
  (import, prepare, build with no tuning database, machine code on every core), reported beside
  it, with its latency (TVM's default schedules). Each timed ``--untuned-repeats`` times, the
  fastest kept (the stricter reference);
- ``serve``: ``tunecache.compile(tune="background", library_cache=False)`` on a copy of the warm
  store: time to the first usable compiled model (goal <= 1.5x untuned), its latency (goal
  <= 1.3x full), outcomes and what it queued;
- ``worker``: ``tunecache.worker.work(once=True, trials_per_task=B)`` on that store: wall time,
  trials; then ``cm.refresh()``: its time, and the refreshed model's latency (goal <= 1.03x
  full);
- ``full``: ``tunecache.compile`` on an empty store at B trials per task: tuning wall time, and
  the latency every goal is relative to;
- ``eager``: PyTorch eager latency, for reference.

Dynamic shapes: ``tunecache.compile(module, example_inputs=<the new model's inputs>,
dynamic=True, tune="background", library_cache=False)`` on another copy of the warm store,
then, for each of ``--seq-lens``, the time of the first call at that length (it compiles the
variant; for the example inputs' length it is the initial compile) against a plain untuned
``tvm.compile`` of that length until its VM is ready (goal: each <= 1.5x; the bare untuned build
beside it), and each variant's latency, beside eager PyTorch at that
length and, at the example length, the ``full`` arm's model (a dedicated full search of it).
Inputs at other lengths are made as the zoo makes them (the spec with ``seq_len`` replaced:
random token ids of that length), and run through the same module.

Store copies use SQLite's backup API (WAL-safe); no library is loaded from the library cache.
Latency: every model is warmed up, then run in ``--rounds`` alternating rounds (order rotated each
round, several calls a round, the round's median kept); an arm's latency is the median of its
rounds (``bench_newmodel.measure_latency``). Outputs are compared with PyTorch eager (largest
absolute difference relative to the reference's largest value; ``--tolerance``).

Progress goes to stderr, the JSON to stdout (and ``--json``, rewritten after each phase), the plot
(latency over wall time per arm, the dynamic first-call times and latencies) to ``--plot``.

Examples::

    python tools/bench_serve.py --budget 4 \\
        --warm bert_base:num_layers=1,hidden=64,heads=2,intermediate=128,vocab=100 \\
        --new bert_base:num_layers=1,hidden=64,heads=2,intermediate=128,vocab=100,seq_len=32 \\
        --seq-lens 32 16 24 40 --rounds 3
    python tools/bench_serve.py --budget 32 --json docs/bench/serve.json --plot docs/bench/serve.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tools"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_newmodel as nm  # noqa: E402 - after the path set-up

DEFAULT_WARM = ["bert_base:num_layers=2"]
DEFAULT_NEW = "bert_base:num_layers=2,seq_len=64"
DEFAULT_SEQ_LENS = [64, 96, 200, 384]
#: Issue 20's goals.
SERVE_COMPILE_VS_UNTUNED = 1.5
SERVE_LATENCY_VS_FULL = 1.3
REFRESHED_LATENCY_VS_FULL = 1.03
DYNAMIC_FIRST_CALL_VS_UNTUNED = 1.5

_T0 = time.time()


def log(msg: str) -> None:
    print(f"[serve {time.time() - _T0:7.0f}s] {msg}", file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str | None:
    try:
        from tunecache.tvm_layer.target import host_fingerprint

        return host_fingerprint().cpu_model
    except Exception as err:  # noqa: BLE001 - context only
        return f"unknown ({type(err).__name__}: {err})"


def _torch_threads() -> int | None:
    try:
        import torch

        return torch.get_num_threads()
    except Exception:  # noqa: BLE001 - context only
        return None


# ---------------------------------------------------------------------------------------------
# Pieces


class Untuned:
    """A bare untuned build as a callable model (TVM's default schedules)."""

    def __init__(self, executable: Any, imported: Any) -> None:
        self.executable, self.imported, self._vm = executable, imported, None
        self.phases: dict[str, float] = {}

    def __call__(self, *inputs: Any) -> Any:
        from tunecache.tvm_layer import frontend

        if self._vm is None:
            self._vm = frontend.make_vm(self.executable)
        return frontend.run(self._vm, self.imported, *inputs)


def untuned_build(model: Any, inputs: Any) -> tuple[float, Untuned]:
    """``bench_newmodel.untuned_build_seconds`` (import, prepare, build with no database), keeping
    the executable so that its latency can be measured too."""
    from tunecache.tvm_layer import frontend

    t0 = time.time()
    imported = frontend.import_model(model, inputs)
    t1 = time.time()
    prepared = frontend.prepare_for_tuning(imported, None)
    t2 = time.time()
    executable = frontend.build(prepared, None)
    t3 = time.time()
    um = Untuned(executable, imported)
    um.phases = {"import_s": t1 - t0, "prepare_s": t2 - t1, "build_s": t3 - t2}
    return t3 - t0, um


def tvm_compile_ready(model: Any, inputs: Any) -> float | None:
    """Seconds of a plain untuned ``tvm.compile`` until a VM is ready to run it (import, compile,
    VM creation: ``tools/bench_never.py``'s baseline, the reference the issue's compile goals
    name), or ``None`` if it failed."""
    import bench_never

    got = bench_never.tvm_baseline(model, inputs)
    return got.get("ready_s")


def inputs_at(spec: str, seq_len: int, seed: int) -> tuple[Any, ...]:
    """The example inputs the zoo makes for ``spec`` with ``seq_len`` replaced (its module is
    built and dropped: only the inputs are used, with the benchmark's own module)."""
    import torch

    from tunecache.models import load_model_spec

    name, _, rest = spec.partition(":")
    params = [kv for kv in rest.split(",") if kv and not kv.startswith("seq_len=")]
    torch.manual_seed(seed + seq_len)
    _m, inputs, _n = load_model_spec(f"{name}:{','.join([*params, f'seq_len={seq_len}'])}")
    return tuple(inputs)


def seq_len_of(inputs: tuple[Any, ...]) -> int:
    return int(inputs[0].shape[1])


def checked(cm: Any, inputs: tuple[Any, ...], ref: Any, tol: float) -> dict[str, Any]:
    import torch

    try:
        with torch.no_grad():
            err = nm.output_error(cm(*inputs), ref)
        return {"output_rel_error": err, "output_ok": err is not None and err <= tol}
    except Exception as err:  # noqa: BLE001
        return {"output_rel_error": None, "output_ok": False, "output_error": nm.error_of(err)["error"]}


def latencies(models: dict[str, Any], inputs: tuple[Any, ...], rounds: int) -> dict[str, dict[str, Any]]:
    try:
        got = nm.measure_latency(models, inputs, rounds)
    except Exception as err:  # noqa: BLE001
        return {a: {"latency_s": None, **nm.error_of(err)} for a in models}
    return {a: {k: v for k, v in d.items() if k != "traceback"} for a, d in got.items()}


def leq(x: float | None, limit: float) -> dict[str, Any]:
    return {"value": None if x is None else round(x, 4), "limit": limit, "met": x is not None and x <= limit}


# ---------------------------------------------------------------------------------------------
# The new model: untuned, serve, worker + refresh, full, eager


def run_serve(args: argparse.Namespace, warm_db: Path, out: dict[str, Any], dump: Any) -> dict[str, Any]:
    import torch

    import tunecache
    import tunecache.worker
    from tunecache.models import load_model_spec

    spec = args.new
    log(f"== {spec}")
    torch.manual_seed(args.seed)
    model, inputs, name = load_model_spec(spec)
    inputs = tuple(inputs)
    model.eval()
    with torch.no_grad():
        ref = model(*inputs)
    res: dict[str, Any] = {"model": spec, "name": name, "input_shapes": [list(x.shape) for x in inputs], "arms": {}}
    out["serve"] = res
    arms = res["arms"]
    models: dict[str, Any] = {"eager": model}
    arms["eager"] = {}

    # -- untuned: a bare untuned build (import, prepare, build), timed --untuned-repeats times
    log(f"{spec}: untuned bare build x{args.untuned_repeats}")
    la = load()
    times = []
    try:
        for _ in range(args.untuned_repeats):
            s, um = untuned_build(model, inputs)
            times.append(s)
        models["untuned"] = um
        plain = [t for t in (tvm_compile_ready(model, inputs) for _ in range(args.untuned_repeats)) if t]
        arms["untuned"] = {"build_s": min(times), "build_s_all": times, "phases_last": um.phases, "loadavg_before": la,
                           "tvm_compile_ready_s": min(plain) if plain else None, "tvm_compile_ready_s_all": plain,
                           "loadavg_after": load()}
        log(f"{spec}: untuned build {', '.join(f'{t:.1f}s' for t in times)}; plain tvm.compile until a VM is ready "
            f"{', '.join(f'{t:.1f}s' for t in plain)}")
    except Exception as err:  # noqa: BLE001
        arms["untuned"] = nm.error_of(err)
        log(f"{spec}: untuned FAILED: {arms['untuned']['error'][:300]}")
    dump()

    # -- serve: background compile on a copy of the warm store
    serve_db = nm.sqlite_copy(warm_db, args.work / "serve.db")
    log(f"{spec}: serve (tune=background) on {serve_db}")
    la = load()
    cm = None
    try:
        t0 = time.time()
        cm = tunecache.compile(model, example_inputs=inputs, store=nm.url(serve_db), tune="background",
                               trials_per_task=args.budget, seed=args.seed, progress=args.progress,
                               library_cache=False)
        wall = time.time() - t0
        models["serve"] = cm
        arms["serve"] = {"compile_wall_s": wall, "phases": phases(wall, cm.report), "queued": len(cm.report.queued),
                         "queue_in_store": len(_queued(serve_db)), **nm.summarize(cm.report),
                         "loadavg_before": la, "loadavg_after": load()}
        log(f"{spec}: serve {cm.report.summary()}; compile {wall:.1f}s")
    except Exception as err:  # noqa: BLE001
        arms["serve"] = nm.error_of(err)
        log(f"{spec}: serve FAILED: {arms['serve']['error'][:300]}")
    dump()

    # -- worker: drain the queue, then refresh the served model
    if cm is not None:
        log(f"{spec}: worker --once at B={args.budget}")
        la = load()
        try:
            t0 = time.time()
            wr = tunecache.worker.work(store=nm.url(serve_db), once=True, trials_per_task=args.budget,
                                       seed=args.seed, progress=args.progress)
            wall = time.time() - t0
            arms["worker"] = {"wall_s": wall, "seconds": wr.seconds, "trials": wr.trials, "batches": wr.batches,
                              "stopped": wr.stopped, "left": wr.left, "dropped": [list(d) for d in wr.dropped],
                              "counts": {o: sum(x.outcome == o for x in wr.outcomes) for o in nm.OUTCOMES},
                              "escalated": sum(bool(x.escalated) for x in wr.outcomes),
                              "summary": wr.summary(), "loadavg_before": la, "loadavg_after": load()}
            log(f"{spec}: {wr.summary()}")
        except Exception as err:  # noqa: BLE001
            arms["worker"] = nm.error_of(err)
            log(f"{spec}: worker FAILED: {arms['worker']['error'][:300]}")
        dump()
        log(f"{spec}: refresh")
        la = load()
        try:
            t0 = time.time()
            improvable = cm.improvable()
            t_imp = time.time() - t0
            new = cm.refresh()
            wall = time.time() - t0
            arms["refreshed"] = {"refresh_s": wall, "improvable_s": t_imp, "improvable": len(improvable),
                                 "changed": new is not cm, **nm.summarize(new.report),
                                 "queued": len(new.report.queued), "queue_in_store": len(_queued(serve_db)),
                                 "loadavg_before": la, "loadavg_after": load()}
            models["refreshed"] = new
            log(f"{spec}: refreshed {new.report.summary()}; refresh {wall:.1f}s")
        except Exception as err:  # noqa: BLE001
            arms["refreshed"] = nm.error_of(err)
            log(f"{spec}: refresh FAILED: {arms['refreshed']['error'][:300]}")
        dump()

    # -- full: the reference, a full search on an empty store
    if not args.skip_full:
        log(f"{spec}: full (tune=auto, empty store) at B={args.budget}")
        la = load()
        try:
            full_cm, info = nm.compile_arm(model, inputs, nm.fresh(args.work / "full.db"), tune="auto",
                                           budget=args.budget, seed=args.seed, progress=args.progress)
            models["full"] = full_cm
            arms["full"] = {**info, "loadavg_before": la, "loadavg_after": load()}
            log(f"{spec}: full {info['summary']}; compile {info['compile_wall_s']:.1f}s")
        except Exception as err:  # noqa: BLE001
            arms["full"] = nm.error_of(err)
            log(f"{spec}: full FAILED: {arms['full']['error'][:300]}")
        dump()

    # -- latency, interleaved; outputs checked
    log(f"{spec}: latency, {args.rounds} alternating rounds over {list(models)}")
    la = load()
    lat = latencies(models, inputs, args.rounds)
    res["latency_loadavg"] = {"before": la, "after": load()}
    for arm, m in models.items():
        arms[arm].update(lat.get(arm, {}))
        if arm != "eager":
            arms[arm].update(checked(m, inputs, ref, args.tolerance))
    full_lat = arms.get("full", {}).get("latency_s")
    for arm in arms.values():
        arm["latency_vs_full"] = nm.ratio(arm.get("latency_s"), full_lat)
    res["full_model"] = models.get("full")  # kept for the dynamic section (dropped before the dump)
    log(f"{spec}: latency " + ", ".join(f"{a} {1e3 * i['latency_s']:.2f}ms" for a, i in arms.items()
                                        if i.get("latency_s")))
    return res


def phases(wall: float, report: Any) -> dict[str, float]:
    """A compile's wall time split: import (outside the ladder), look-up/replay/queue, build."""
    return {"import_s": wall - report.seconds_total, "build_s": report.seconds_build,
            "ladder_s": report.seconds_total - report.seconds_build - report.seconds_tuning,
            "tuning_s": report.seconds_tuning}


def _queued(path: Path) -> list[Any]:
    try:
        from tunecache.store import open_store
        from tunecache.tvm_layer.target import hardware_key, resolve_target

        return list(open_store(nm.url(path)).queued(hardware_key(resolve_target(None))))
    except Exception:  # noqa: BLE001 - context only
        return []


# ---------------------------------------------------------------------------------------------
# Dynamic shapes


def run_dynamic(args: argparse.Namespace, warm_db: Path, full_model: Any, out: dict[str, Any], dump: Any) -> None:
    import torch

    import tunecache
    from tunecache.models import load_model_spec

    spec = args.new
    torch.manual_seed(args.seed)
    model, inputs0, _name = load_model_spec(spec)  # the same seed: the same weights as the serve section
    inputs0 = tuple(inputs0)
    model.eval()
    l0 = seq_len_of(inputs0)
    lens = list(dict.fromkeys([x for x in args.seq_lens]))
    if l0 not in lens:
        lens.insert(0, l0)
    res: dict[str, Any] = {"model": spec, "example_seq_len": l0, "seq_lens": lens, "per_len": {}}
    out["dynamic"] = res
    dyn_db = nm.sqlite_copy(warm_db, args.work / "dynamic.db")

    log(f"dynamic: compile(dynamic=True, tune=background) at seq {l0} on {dyn_db}")
    try:
        t0 = time.time()
        dm = tunecache.compile(model, example_inputs=inputs0, dynamic=True, tune="background", store=nm.url(dyn_db),
                               trials_per_task=args.budget, seed=args.seed, progress=args.progress,
                               library_cache=False, max_variants=max(8, len(lens)))
        init_s = time.time() - t0
    except Exception as err:  # noqa: BLE001
        res["error"] = nm.error_of(err)
        log(f"dynamic FAILED: {res['error']['error'][:300]}")
        return
    res["initial_compile_s"] = init_s
    log(f"dynamic: initial compile {init_s:.1f}s")
    for n in lens:
        row: dict[str, Any] = {"loadavg_before": load()}
        res["per_len"][str(n)] = row
        try:
            x = inputs0 if n == l0 else inputs_at(spec, n, args.seed)
            with torch.no_grad():
                ref = model(*x)
            if n == l0:
                row["first_call_s"] = init_s
                row["first_call_is"] = ("the initial compile (compile(dynamic=True) compiles the example inputs' "
                                        "variant)")
            else:
                t0 = time.time()
                with torch.no_grad():
                    dm(*x)
                row["first_call_s"] = time.time() - t0
                row["first_call_is"] = "the first call at this length (compiles its variant, then runs it)"
            v = dm.variant(*x)
            row["phases"] = phases(row["first_call_s"], v.report)
            row.update({"queued": len(v.report.queued), **{k: val for k, val in nm.summarize(v.report).items()
                                                            if k != "per_task"}})
            row.update(checked(dm, x, ref, args.tolerance))
            log(f"dynamic: seq {n}: first call {row['first_call_s']:.1f}s; {v.report.summary()}")
            s, um = untuned_build(model, x)
            row["untuned_build_s"] = s
            row["untuned_phases"] = um.phases
            row["first_call_vs_untuned"] = nm.ratio(row["first_call_s"], s)
            row["tvm_compile_ready_s"] = tvm_compile_ready(model, x)
            row["first_call_vs_tvm_compile"] = nm.ratio(row["first_call_s"], row["tvm_compile_ready_s"])
            log(f"dynamic: seq {n}: untuned build {s:.1f}s -> {row['first_call_vs_untuned']:.2f}x; plain "
                f"tvm.compile ready {row['tvm_compile_ready_s']}s -> {row['first_call_vs_tvm_compile']}x")
            ms: dict[str, Any] = {"dynamic": dm, "eager": model}
            if n == l0 and full_model is not None:
                ms["full"] = full_model
            lat = latencies(ms, x, args.rounds)
            row["latency"] = {a: d.get("latency_s") for a, d in lat.items()}
            row["latency_rounds"] = {a: d.get("rounds") for a, d in lat.items()}
            errs = {a: d["error"] for a, d in lat.items() if d.get("error")}
            if errs:
                row["latency_errors"] = errs
            row["dynamic_vs_eager"] = nm.ratio(row["latency"].get("dynamic"), row["latency"].get("eager"))
            if "full" in row["latency"]:
                row["dynamic_vs_full"] = nm.ratio(row["latency"].get("dynamic"), row["latency"].get("full"))
            del um
        except Exception as err:  # noqa: BLE001
            row.update(nm.error_of(err))
            log(f"dynamic: seq {n} FAILED: {row['error'][:300]}")
        row["loadavg_after"] = load()
        dump()
    res["variants_kept"] = len(dm)
    res["queue_in_store"] = len(_queued(dyn_db))


# ---------------------------------------------------------------------------------------------
# Goals, table, plot


def goals(out: dict[str, Any]) -> dict[str, Any]:
    g: dict[str, Any] = {}
    arms = out.get("serve", {}).get("arms", {})
    # The issue's reference is an untuned tvm.compile (until a VM is ready); tunecache's own bare
    # untuned build is reported beside it.
    unt = arms.get("untuned", {}).get("build_s")
    plain = arms.get("untuned", {}).get("tvm_compile_ready_s")
    sv = arms.get("serve", {})
    g[f"serve_compile<={SERVE_COMPILE_VS_UNTUNED}x_tvm_compile"] = leq(nm.ratio(sv.get("compile_wall_s"), plain),
                                                                       SERVE_COMPILE_VS_UNTUNED)
    g[f"serve_compile<={SERVE_COMPILE_VS_UNTUNED}x_bare_untuned_build"] = leq(nm.ratio(sv.get("compile_wall_s"), unt),
                                                                              SERVE_COMPILE_VS_UNTUNED)
    g[f"serve_latency<={SERVE_LATENCY_VS_FULL}x_full"] = leq(sv.get("latency_vs_full"), SERVE_LATENCY_VS_FULL)
    g[f"refreshed_latency<={REFRESHED_LATENCY_VS_FULL}x_full"] = leq(arms.get("refreshed", {}).get("latency_vs_full"),
                                                                     REFRESHED_LATENCY_VS_FULL)
    for n, row in out.get("dynamic", {}).get("per_len", {}).items():
        g[f"dynamic_seq{n}_first_call<={DYNAMIC_FIRST_CALL_VS_UNTUNED}x_tvm_compile"] = leq(
            row.get("first_call_vs_tvm_compile"), DYNAMIC_FIRST_CALL_VS_UNTUNED)
        g[f"dynamic_seq{n}_first_call<={DYNAMIC_FIRST_CALL_VS_UNTUNED}x_bare_untuned_build"] = leq(
            row.get("first_call_vs_untuned"), DYNAMIC_FIRST_CALL_VS_UNTUNED)
    return g


def fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def table(out: dict[str, Any]) -> str:
    arms = out.get("serve", {}).get("arms", {})
    lines = [f"{'arm':<10} {'time_s':>8} {'what':<28} {'lat_ms':>9} {'lat/full':>8} {'trials':>6}  outcomes",
             "-" * 100]
    what = {"untuned": "bare untuned build (min)", "serve": "compile(background)", "worker": "worker --once",
            "refreshed": "cm.refresh()", "full": "compile, empty store", "eager": "PyTorch eager"}
    tkey = {"untuned": "build_s", "serve": "compile_wall_s", "worker": "wall_s", "refreshed": "refresh_s",
            "full": "compile_wall_s"}
    for a in ("eager", "untuned", "serve", "worker", "refreshed", "full"):
        i = arms.get(a)
        if i is None:
            continue
        if "error" in i and "latency_s" not in i and "summary" not in i:
            lines.append(f"{a:<10} ERROR {i['error'][:80]}")
            continue
        lat = i.get("latency_s")
        if a == "untuned" and i.get("tvm_compile_ready_s"):
            lines.append(f"{'tvm':<10} {fmt(i['tvm_compile_ready_s'], '8.1f')} {'tvm.compile until VM ready':<28}")
        lines.append(f"{a:<10} {fmt(i.get(tkey.get(a, '')), '8.1f')} {what[a]:<28} "
                     f"{fmt(lat * 1e3 if lat else None, '9.2f')} {fmt(i.get('latency_vs_full'), '8.3f')} "
                     f"{fmt(i.get('trials'), '6d')}  {i.get('summary', '')[:120]}")
    dyn = out.get("dynamic", {})
    if dyn.get("per_len"):
        lines += ["", f"{'seq':>5} {'first_s':>8} {'untuned_s':>9} {'ratio':>6} {'tvm_s':>6} {'ratio':>6} "
                      f"{'lat_ms':>8} {'eager_ms':>8} "
                      f"{'full_ms':>8} {'ok':>3}  outcomes", "-" * 100]
        for n, r in dyn["per_len"].items():
            if "error" in r and "first_call_s" not in r:
                lines.append(f"{n:>5} ERROR {r['error'][:80]}")
                continue
            la = r.get("latency", {})
            ms = {k: (v * 1e3 if v else None) for k, v in la.items()}
            lines.append(f"{n:>5} {fmt(r.get('first_call_s'), '8.1f')} {fmt(r.get('untuned_build_s'), '9.1f')} "
                         f"{fmt(r.get('first_call_vs_untuned'), '6.2f')} {fmt(r.get('tvm_compile_ready_s'), '6.1f')} "
                         f"{fmt(r.get('first_call_vs_tvm_compile'), '6.2f')} {fmt(ms.get('dynamic'), '8.2f')} "
                         f"{fmt(ms.get('eager'), '8.2f')} {fmt(ms.get('full'), '8.2f')} "
                         f"{'yes' if r.get('output_ok') else 'NO':>3}  {r.get('summary', '')[:110]}")
    g = out.get("goals", {})
    if g:
        lines += ["", "goals:"] + [f"  {k}: {fmt(v['value'], '.3f')} -> {'met' if v['met'] else 'NOT met'}"
                                   for k, v in g.items()]
    return "\n".join(lines)


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = out.get("serve", {}).get("arms", {})
    dyn = out.get("dynamic", {}).get("per_len", {})
    fig, axes = plt.subplots(1, 3 if dyn else 1, figsize=(19 if dyn else 7, 4.8), squeeze=False)
    ax = axes[0, 0]
    colors = {"full": "black", "serve": "tab:blue", "untuned": "tab:gray", "eager": "tab:orange",
              "dynamic": "tab:green"}

    def ms(a: str) -> float | None:
        x = arms.get(a, {}).get("latency_s")
        return x * 1e3 if x else None

    ends = [1.0]
    if ms("eager"):
        ax.axhline(ms("eager"), color=colors["eager"], lw=1.0, ls="--", label=f"PyTorch eager {ms('eager'):.2f} ms")
    if ms("untuned") and arms["untuned"].get("build_s"):
        t = arms["untuned"]["build_s"]
        ax.scatter([t], [ms("untuned")], color=colors["untuned"], marker="x", s=60, zorder=3,
                   label=f"untuned tvm.compile: {t:.0f} s, {ms('untuned'):.1f} ms")
        ends.append(t)
    if ms("full") and arms["full"].get("compile_wall_s"):
        t = arms["full"]["compile_wall_s"]
        ax.scatter([t], [ms("full")], color=colors["full"], marker="s", s=60, zorder=3,
                   label=f"full search (empty store): {t:.0f} s, {ms('full'):.2f} ms")
        ends.append(t)
    if ms("serve") and arms["serve"].get("compile_wall_s"):
        t1 = arms["serve"]["compile_wall_s"]
        xs, ys = [t1], [ms("serve")]
        lab = f"serve: {t1:.0f} s, {ms('serve'):.2f} ms"
        if ms("refreshed"):
            t2 = t1 + (arms.get("worker", {}).get("wall_s") or 0.0)
            t3 = t2 + (arms["refreshed"].get("refresh_s") or 0.0)
            xs += [t3, t3]
            ys += [ms("serve"), ms("refreshed")]
            ax.axvspan(t1, t2, color=colors["serve"], alpha=0.08, label="worker draining the queue")
            lab += f"; worker + refresh -> {t3:.0f} s, {ms('refreshed'):.2f} ms"
            ends.append(t3)
        ax.plot(xs, ys, color=colors["serve"], marker="o", lw=1.5, zorder=3, label=lab)
        ends.append(t1)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_yscale("log")
    ax.set_xlim(0, max(ends) * 1.5)
    ax.set_xlabel("wall time from the arm's start (s, symlog): when its model is usable")
    ax.set_ylabel("end-to-end latency (ms, log)")
    ax.set_title(f"{out.get('serve', {}).get('model', '')}: latency over wall time", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")

    if dyn:
        ok = {n: r for n, r in dyn.items() if r.get("first_call_s") is not None}
        names = list(ok)
        xs = range(len(names))
        ax = axes[0, 1]
        w = 0.38
        ax.bar([x - w / 2 for x in xs], [ok[n]["first_call_s"] for n in names], w, color=colors["dynamic"],
               label="dynamic=True: first call (compiles the variant)")
        ax.bar([x + w / 2 for x in xs], [ok[n].get("untuned_build_s") or 0 for n in names], w,
               color=colors["untuned"], label="bare untuned tvm.compile")
        for x, n in zip(xs, names, strict=True):
            r = ok[n].get("first_call_vs_untuned")
            if r is not None:
                ax.annotate(f"{r:.2f}x", (x, ok[n]["first_call_s"]), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [f"seq {n}" for n in names])
        ax.set_ylabel("seconds")
        ax.set_title(f"time to serve a new shape (goal <= {DYNAMIC_FIRST_CALL_VS_UNTUNED}x untuned)", fontsize=9)
        ax.grid(True, alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="best")

        ax = axes[0, 2]
        for arm, mk in (("dynamic", "o"), ("eager", "^"), ("full", "s")):
            pts = sorted((int(n), ok[n]["latency"][arm] * 1e3) for n in names
                         if ok[n].get("latency", {}).get(arm))
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=mk, color=colors[arm], lw=1.0,
                        label={"dynamic": "dynamic variant (background: replayed/predicted/fallback)",
                               "eager": "PyTorch eager", "full": "dedicated full search"}[arm])
        ax.set_xlabel("sequence length")
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms, log)")
        ax.set_title("latency of each variant", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"Serve now, improve later (B={out.get('budget')} trials per full search; "
                 f"{out.get('cpu_model')}, load {out.get('loadavg_before')} -> {out.get('loadavg_after')})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"plot: {path}")


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm", nargs="+", default=DEFAULT_WARM, metavar="MODEL",
                    help="models the store is warmed with (default: %(default)s)")
    ap.add_argument("--new", default=DEFAULT_NEW, metavar="MODEL",
                    help="the new model, a zoo spec with seq_len (default: %(default)s)")
    ap.add_argument("--seq-lens", nargs="+", type=int, default=DEFAULT_SEQ_LENS, metavar="N",
                    help="sequence lengths served by the dynamic model (default: %(default)s)")
    ap.add_argument("--budget", type=int, default=32, help="trials per full search, B (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating latency rounds (default: %(default)s)")
    ap.add_argument("--untuned-repeats", type=int, default=2,
                    help="bare untuned builds of the new model; the fastest is the reference (default: %(default)s)")
    ap.add_argument("--tolerance", type=float, default=1e-3,
                    help="largest output error, relative to the reference's largest value (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="search and input seed (default: %(default)s)")
    ap.add_argument("--work", type=Path, default=None, help="directory for the stores (default: temporary)")
    ap.add_argument("--warm-db", type=Path, default=None,
                    help="warm store path (default WORK/warm.db); an existing one is resumed (all hits if done)")
    ap.add_argument("--json", type=Path, default=None, help="also write the JSON here (rewritten after each phase)")
    ap.add_argument("--plot", type=Path, default=None, help="PNG: latency over wall time per arm, dynamic shapes")
    ap.add_argument("--skip-full", action="store_true", help="no full arm (no latency goals)")
    ap.add_argument("--skip-dynamic", action="store_true", help="no dynamic-shape section")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no tuning progress lines")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="run nothing: print the table of a JSON this tool wrote (and --plot it)")
    args = ap.parse_args(argv)
    if args.from_json is not None:
        done = json.loads(args.from_json.read_text())
        done["goals"] = goals(done)
        print(table(done))
        if args.plot is not None:
            plot(done, args.plot)
        return 0
    if args.budget < 1 or args.rounds < 1 or args.untuned_repeats < 1:
        ap.error("--budget, --rounds and --untuned-repeats must be >= 1")

    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_serve-")
        args.work = Path(tmp.name)
    args.work.mkdir(parents=True, exist_ok=True)
    warm_db = args.warm_db or args.work / "warm.db"
    out: dict[str, Any] = {
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]), "budget": args.budget,
        "rounds": args.rounds, "seed": args.seed, "cpu_model": cpu_model(), "loadavg_before": load(),
        "machine": nm.machine(), "torch_threads": _torch_threads(), "warm": None, "serve": None, "dynamic": None,
    }

    def dump() -> None:
        out["loadavg_after"] = load()
        out["wall_s"] = time.time() - _T0
        if args.json is not None:
            args.json.write_text(json.dumps(out, indent=1, default=str))

    log(f"machine: {out['cpu_model']}, load {out['loadavg_before']}, work {args.work}")
    try:
        try:
            out["warm"] = nm.warm_store(list(args.warm), args.budget, warm_db, args.seed, args.progress)
        except Exception as err:  # noqa: BLE001 - the arms still run on whatever the store holds
            out["warm"] = {"models": args.warm, **nm.error_of(err)}
            log(f"warm FAILED: {out['warm']['error'][:300]}")
            if not warm_db.exists():
                from tunecache.store import open_store
                open_store(nm.url(warm_db))
        dump()
        full_model = None
        try:
            res = run_serve(args, warm_db, out, dump)
            full_model = res.pop("full_model", None)
        except Exception as err:  # noqa: BLE001
            out["serve"] = {"model": args.new, **nm.error_of(err)}
            log(f"serve FAILED: {out['serve']['error'][:300]}")
        dump()
        if not args.skip_dynamic:
            try:
                run_dynamic(args, warm_db, full_model, out, dump)
            except Exception as err:  # noqa: BLE001
                out["dynamic"] = {"model": args.new, **nm.error_of(err)}
                log(f"dynamic FAILED: {out['dynamic']['error'][:300]}")
        out["goals"] = goals(out)
        dump()
        out["table"] = table(out)
        if args.plot is not None:
            try:
                plot(out, args.plot)
            except Exception as err:  # noqa: BLE001
                out["plot_error"] = nm.error_of(err)["error"]
                log(f"plot FAILED: {out['plot_error'][:300]}")
        dump()
        print(out["table"], file=sys.stderr)
        print(json.dumps(out, indent=1, default=str))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
