"""Synthetic team stores for ``tools/bench_store.py --scale``: real TIR workloads, real traces.

Every stored workload is a real TIR ``IRModule``: a *template* (an operator family with its
layout, dtypes, padding and fused epilogue) built at one of many shapes by
:func:`tunecache.tvm_layer.bridges.materialize_bridge`, hashed and serialized by MetaSchedule
(:func:`tunecache.tvm_layer.convert.workload_of`), described as ``compile`` describes a task
(:func:`tunecache.tvm_layer.convert.describe_module`) and analysed by
:func:`tunecache.tvm_layer.loopnest.analyze` for its reuse-index entry.

The one shortcut: the *sketch* (decision digest, the expensive part of
:func:`tunecache.tvm_layer.bridges.describe_tasks`, ~5-25 ms a workload: a MetaSchedule design
space) is computed through TVM once per template and reused for the template's other shapes.
Every ``verify_every``-th workload is described in full and checked against it; a mismatch
keeps the real sketch and is counted (the JSON reports both numbers).

Traces are real: each template's design space is sampled ``TRACES_PER_TEMPLATE`` times (random
decisions, the target's postprocessors applied), converted as MetaSchedule's ``TuningRecord``
JSON; the records of every shape of a template use those traces (decodable; replaying one on
another shape rescales its tile decisions as a narrowed search would).

Generated workloads are cached on disk (``chunk_NNNNN.pkl``, ``CHUNK`` workloads each, the
module JSON zlib-compressed) under a directory named by the generator's inputs, so the same
store content is committed to every backend and re-runs skip generation. Workload ``i`` depends
only on ``i`` and the seed: a smaller store is a prefix of a larger one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunecache.reuse.loopnest import LoopNest, canonical_roles
from tunecache.store import Provenance, Record
from tunecache.store.keys import HardwareKey, WorkloadDesc, WorkloadKey
from tunecache.store.values import ReuseEntry

#: Workloads per cache file (and per generation job).
CHUNK = 500
#: Traces sampled per template.
TRACES_PER_TEMPLATE = 4
#: Bump when what is generated changes (it names the cache directory).
GENERATOR_VERSION = 4

_N = (1, 2, 4, 8, 16)
_CH = tuple(range(8, 1025, 8))
_HW = (7, 8, 13, 14, 16, 26, 28, 32, 52, 56, 64, 112, 128, 224)
_MM = tuple(range(16, 8193, 16))
_M = (1, 2, 4, 8, 16, 32, 64, 96, 128, 196, 256, 384, 512, 768, 1024, 2048, 4096)
_B = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
_BMM = tuple(range(16, 2049, 16))
_G = (2, 4, 8, 16, 32, 64)
_GCH = tuple(range(4, 129, 4))

#: Values each canonical role takes, per family (kernel extents are fixed by the template).
_SPACES: dict[str, dict[str, tuple[int, ...]]] = {
    "conv2d": {"N": _N, "K": _CH, "OH": _HW, "OW": _HW, "C": (3, *_CH)},
    "conv2d_transpose": {"N": _N, "K": _CH, "OH": _HW, "OW": _HW, "C": _CH},
    "conv1d": {"N": _N, "K": _CH, "OW": tuple(range(16, 4097, 16)), "C": _CH},
    "conv3d": {"N": _N, "K": _CH, "OD": (4, 8, 16, 32), "OH": _HW, "OW": _HW, "C": _CH},
    "depthwise_conv2d": {"N": _N, "K": _CH, "OH": _HW, "OW": _HW},
    "group_conv2d": {"N": _N, "G": _G, "K": _GCH, "OH": _HW, "OW": _HW, "C": _GCH},
    "matmul": {"M": _M, "N": _MM, "K": _MM},
    "batch_matmul": {"B": _B, "M": _BMM, "N": _BMM, "K": _BMM},
}


@dataclass(frozen=True)
class Template:
    """An operator at any shape: what :func:`materialize_bridge` mirrors, and its sketch."""

    name: str
    proto: LoopNest                       # family, layout, dtype, padding, epilogue to mirror
    base: tuple[int, ...]                 # canonical extents of the described base shape
    sketch: str                           # decision digest of the base shape (TVM)
    trivial: bool
    group: str                            # reuse group of the base shape
    traces: tuple[str, ...]               # TuningRecord trace JSON texts, sampled on the base shape
    related: bool = False                 # in a reuse group of the model's misses
    fixed: tuple[tuple[str, int], ...] = field(default=())  # roles kept at the base's value

    def space(self) -> list[tuple[int, ...]]:
        roles = canonical_roles(self.proto.family)
        fixed = dict(self.fixed)
        vals = _SPACES[self.proto.family]
        return [(fixed[r],) if r in fixed else vals.get(r, (self.base[i],)) for i, r in enumerate(roles)]

    def shape(self, j: int) -> tuple[int, ...]:
        """The ``j``-th shape of a fixed pseudo-random order: distinct for distinct ``j``."""
        space = self.space()
        total = math.prod(len(v) for v in space)
        step = 1_000_003
        while math.gcd(step, total) != 1:
            step += 2
        off = int(hashlib.sha256(self.name.encode()).hexdigest()[:8], 16)
        idx = (j * step + off) % total
        out = []
        for vals in reversed(space):
            idx, d = divmod(idx, len(vals))
            out.append(vals[d])
        return tuple(reversed(out))


@dataclass(frozen=True)
class SynthWorkload:
    """One generated workload: everything a compile would leave in the store for it."""

    key: WorkloadKey
    desc: WorkloadDesc
    mod_json_z: bytes
    entry: ReuseEntry
    args_info: list[Any]
    template: int
    work: int

    @property
    def mod_json(self) -> str:
        return zlib.decompress(self.mod_json_z).decode("utf-8")


# ------------------------------------------------------------------------------------------
# Templates (TVM)


def _proto(family: str, layout: str, dtype: str, params: Sequence[tuple[str, Any]] = (),
           roles: tuple[str, ...] = (), epilogue: tuple[str, ...] = ()) -> LoopNest:
    return LoopNest(family, (), (), dtype, "", "", layout, roles, (), tuple(params), epilogue)


def _protos() -> list[tuple[str, LoopNest, tuple[int, ...]]]:
    """Operator templates beyond the model's own: families x layouts x dtypes x epilogues."""
    out: list[tuple[str, LoopNest, tuple[int, ...]]] = []
    out_dt = {"float32": "float32", "float16": "float16", "bfloat16": "float32", "int8": "int32"}
    conv_layouts = {"NHWC/HWIO": ("add:111x", "add:xxxx"), "NHWC/OHWI": ("add:111x", "add:xxxx"),
                    "NCHW/OIHW": ("add:1x11", "add:xxxx")}
    for lay, (bias, res) in conv_layouts.items():
        for dt in ("float32", "float16", "bfloat16", "int8"):
            fl = dt.startswith("float") or dt == "bfloat16"
            epis = [(), (bias,), (bias, "relu"), (bias, res, "relu")] if fl else [(), (bias,)]
            for k, pad in ((1, 0), (3, 1), (5, 2), (7, 3)):
                for epi in epis:
                    p = _proto("conv2d", lay, dt, (("padding", (pad,) * 4), ("out_dtype", out_dt[dt])), epilogue=epi)
                    out.append((f"conv2d_{lay}_{dt}_k{k}_{'+'.join(epi) or 'bare'}", p, (1, 64, 28, 28, 64, k, k)))
            if lay != "NHWC/OHWI":
                for epi in [(), (bias, "relu")] if fl else [()]:
                    p = _proto("depthwise_conv2d", lay, dt, (("padding", (1,) * 4), ("out_dtype", out_dt[dt])),
                               epilogue=epi)
                    out.append((f"dw_{lay}_{dt}_{'+'.join(epi) or 'bare'}", p, (1, 64, 28, 28, 3, 3)))
                    p = _proto("group_conv2d", lay, dt, (("padding", (1,) * 4), ("out_dtype", out_dt[dt])),
                               epilogue=epi)
                    out.append((f"gconv_{lay}_{dt}_{'+'.join(epi) or 'bare'}", p, (1, 4, 16, 28, 28, 16, 3, 3)))
    for lay in ("NCW/OIW", "NWC/WIO"):
        for dt in ("float32", "float16"):
            p = _proto("conv1d", lay, dt, (("padding", (1, 1)), ("out_dtype", out_dt[dt])))
            out.append((f"conv1d_{lay}_{dt}", p, (1, 64, 128, 64, 3)))
    for lay in ("NCDHW/OIDHW", "NDHWC/DHWIO"):
        for dt in ("float32", "float16"):
            p = _proto("conv3d", lay, dt, (("padding", (1,) * 6), ("out_dtype", out_dt[dt])))
            out.append((f"conv3d_{lay}_{dt}", p, (1, 32, 8, 14, 14, 32, 3, 3, 3)))
    for s in (1, 2):
        p = _proto("conv2d_transpose", "NCHW/IOHW", "float32", (("strides", (s, s)),))
        out.append((f"convT_s{s}", p, (1, 32, 28, 28, 32, 4, 4)))
    for lay in ("MK/KN", "MK/NK"):
        for dt in ("float32", "float16", "bfloat16", "int8"):
            fl = dt != "int8"
            for epi in [(), ("add:x",), ("add:x", "relu"), ("add:xx",)] if fl else [(), ("add:x",)]:
                p = _proto("matmul", lay, dt, (("out_dtype", out_dt[dt]),), ("M", "N", "K"), epi)
                out.append((f"matmul_{lay}_{dt}_{'+'.join(epi) or 'bare'}", p, (128, 256, 512)))
    for lay in ("BMK/BKN", "BMK/BNK"):
        for dt in ("float32", "float16", "bfloat16", "int8"):
            for epi in [(), ("add:xxx",)] if dt != "int8" else [()]:
                p = _proto("batch_matmul", lay, dt, (("out_dtype", out_dt[dt]),), ("B", "M", "N", "K"), epi)
                out.append((f"bmm_{lay}_{dt}_{'+'.join(epi) or 'bare'}", p, (8, 128, 128, 64)))
    return out


def sample_traces(mod: Any, target: Any, n: int, seed: int = 1) -> tuple[str, ...]:
    """``n`` real traces of ``mod``: design-space samples with the target's postprocessors applied."""
    from tunecache.tvm_layer import ms as load_ms
    from tunecache.tvm_layer.convert import tuning_record_json, workload_of

    ms = load_ms()
    _, _, wl = workload_of(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    out: list[str] = []
    for r in range(n * 3):
        if len(out) == n:
            break
        ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name="t",
                             rand_state=seed + r)
        spaces = list(ctx.generate_design_space())
        sch = spaces[r % len(spaces)]
        sch.enter_postproc()
        if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
            continue
        rec = ms.database.TuningRecord(sch.trace, wl, [1e-3], target, args)
        out.append(json.dumps(tuning_record_json(rec)[0], separators=(",", ":")))
    return tuple(out)


def build_templates(target: Any, miss_tasks: Sequence[Any]) -> list[Template]:
    """The model's misses as templates (related), then the generic operator templates.

    ``miss_tasks`` are described :class:`~tunecache.reuse.planner.PlanTask` values with their
    ``mod`` attached as ``(plan_task, mod)`` pairs. A generic template whose reuse group is one
    of the misses' is related too; duplicates of a group and epilogue are kept (distinct
    workloads), failures to build or describe are skipped.
    """
    from tunecache.reuse.index import group_of
    from tunecache.tvm_layer.bridges import describe_tasks, materialize_bridge
    from tunecache.tvm_layer.convert import workload_of

    out: list[Template] = []
    miss_groups = set()
    for pt, mod in miss_tasks:
        roles = canonical_roles(pt.nest.family)
        kern = tuple((r, e) for r, e in zip(roles, pt.nest.extents, strict=False) if r.startswith("K") and r != "K")
        g = group_of(pt.nest, pt.sketch)
        miss_groups.add(g)
        out.append(Template(f"miss:{pt.name}", pt.nest, tuple(pt.nest.extents), pt.sketch, pt.trivial, g,
                            sample_traces(mod, target, TRACES_PER_TEMPLATE), True, kern))
    for name, proto, base in _protos():
        try:
            mod = materialize_bridge(proto, base)
            key, _, _ = workload_of(mod)
            (pt,) = describe_tasks([(key, name, 0.0, mod)], target)
            traces = sample_traces(mod, target, TRACES_PER_TEMPLATE)
        except Exception:  # noqa: BLE001 - a template this TVM cannot build is left out
            continue
        if pt.nest.family != proto.family or not traces:
            continue
        roles = canonical_roles(proto.family)
        kern = tuple((r, e) for r, e in zip(roles, base, strict=False) if r.startswith("K") and r != "K")
        g = group_of(pt.nest, pt.sketch)
        out.append(Template(name, proto, base, pt.sketch, pt.trivial, g, traces, g in miss_groups, kern))
    return out


# ------------------------------------------------------------------------------------------
# Assignment and generation


def assignment(n: int, n_templates: int, related: Sequence[int], seed: int,
               related_share: float) -> list[tuple[int, int]]:
    """``(template, j)`` of workloads ``0..n-1``: a ``related_share`` of them from the related
    templates, the rest spread over the others; ``j`` counts the template's earlier workloads."""
    rel = list(related)
    unrel = [t for t in range(n_templates) if t not in set(rel)]
    count = [0] * n_templates
    out = []
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        t = rng.choice(rel) if rel and (rng.random() < related_share or not unrel) else rng.choice(unrel)
        out.append((t, count[t]))
        count[t] += 1
    return out


_W: dict[str, Any] = {}


def _worker_init(templates: list[Template], target_id: str) -> None:
    from tunecache.tvm_layer.target import resolve_target

    _W["templates"] = templates
    _W["target_id"] = target_id
    _W["target"] = resolve_target(None)


def generate_one(i: int, t_idx: int, j: int, verify: bool) -> tuple[SynthWorkload, bool | None]:
    """Workload ``i`` (template ``t_idx``, its ``j``-th shape); with ``verify``, also whether the
    template's sketch matched a full TVM description of it."""
    from tunecache.reuse.index import entry_of
    from tunecache.reuse.planner import PlanTask
    from tunecache.tvm_layer.bridges import materialize_bridge
    from tunecache.tvm_layer.convert import describe_module, workload_of
    from tunecache.tvm_layer.loopnest import analyze

    t: Template = _W["templates"][t_idx]
    ext = t.shape(j)
    mod = materialize_bridge(t.proto, ext)
    key, mod_json, _ = workload_of(mod)
    name = f"{t.name.removeprefix('miss:')}_{j}"
    desc = describe_module(mod, name=name)
    nest = analyze(mod)
    sketch, trivial, same = t.sketch, t.trivial, None
    if verify:
        from tunecache.tvm_layer.sketch import decision_digest, decision_texts

        texts = decision_texts(mod, _W["target"])
        real, real_trivial = decision_digest(texts), len(texts) == 1 and not texts[0]
        same = real == sketch and real_trivial == trivial
        sketch, trivial = real, real_trivial
    entry = entry_of(PlanTask(key, name, 0.0, nest, sketch, trivial), _W["target_id"])
    args = [["TENSOR", dt, list(s)] for s, dt in zip(desc.shapes, desc.dtypes, strict=False)]
    sw = SynthWorkload(key, desc, zlib.compress(mod_json.encode("utf-8"), 3), entry, args, t_idx, nest.work)
    return sw, same


def _gen_chunk(job: tuple[int, list[tuple[int, int, int]], str, int]) -> tuple[int, float, int, int]:
    c, items, path, verify_every = job
    t0 = time.process_time()
    out, checked, mismatched = [], 0, 0
    for i, t_idx, j in items:
        sw, same = generate_one(i, t_idx, j, verify_every > 0 and i % verify_every == 0)
        out.append(sw)
        if same is not None:
            checked += 1
            mismatched += not same
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        pickle.dump({"workloads": out, "checked": checked, "mismatched": mismatched}, f, protocol=5)
    os.replace(tmp, path)
    return c, time.process_time() - t0, checked, mismatched


def cache_dir(root: str, templates: Sequence[Template], seed: int, related_share: float) -> Path:
    h = hashlib.sha256(json.dumps([GENERATOR_VERSION, seed, related_share, CHUNK,
                                   [(t.name, t.group, t.sketch) for t in templates]]).encode()).hexdigest()[:16]
    d = Path(root) / h
    d.mkdir(parents=True, exist_ok=True)
    return d


def ensure_generated(directory: Path, n: int, templates: list[Template], target_id: str, seed: int,
                     related_share: float, workers: int, verify_every: int,
                     log: Any = print) -> dict[str, Any]:
    """Generate (or find cached) workloads ``0..n-1``; return what generation cost."""
    import multiprocessing as mp

    assign = assignment(n, len(templates), [k for k, t in enumerate(templates) if t.related], seed, related_share)
    n_chunks = (n + CHUNK - 1) // CHUNK
    jobs = []
    for c in range(n_chunks):
        path = directory / f"chunk_{c:05d}.pkl"
        if path.exists():
            continue
        lo, hi = c * CHUNK, (c + 1) * CHUNK  # a chunk is always whole: a later, larger run reuses it
        full = assign if hi <= len(assign) else assignment(hi, len(templates),
                                                           [k for k, t in enumerate(templates) if t.related],
                                                           seed, related_share)
        jobs.append((c, [(i, *full[i]) for i in range(lo, hi)], str(path), verify_every))
    stats = {"chunks": n_chunks, "generated_chunks": len(jobs), "cpu_s": 0.0, "wall_s": 0.0}
    if not jobs:
        return stats
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_worker_init, initargs=(templates, target_id)) as pool:
        done = 0
        for _c, cpu, _chk, _mis in pool.imap_unordered(_gen_chunk, jobs):
            done += 1
            stats["cpu_s"] += cpu
            if done % 10 == 0 or done == len(jobs):
                el = time.perf_counter() - t0
                log(f"generated {done}/{len(jobs)} chunks ({done * CHUNK} workloads) in {el:.0f} s")
    stats["wall_s"] = time.perf_counter() - t0
    stats["cpu_ms_per_workload"] = 1e3 * stats["cpu_s"] / (len(jobs) * CHUNK)
    return stats


def load_workloads(directory: Path, lo: int, hi: int) -> Iterator[SynthWorkload]:
    """Yield cached workloads ``lo..hi-1`` in order."""
    for c in range(lo // CHUNK, (hi + CHUNK - 1) // CHUNK):
        with open(directory / f"chunk_{c:05d}.pkl", "rb") as f:
            data = pickle.load(f)
        for k, sw in enumerate(data["workloads"]):
            if lo <= c * CHUNK + k < hi:
                yield sw


def verification(directory: Path, n: int) -> tuple[int, int]:
    """``(checked, mismatched)`` sketch verifications over the chunks holding ``0..n-1``."""
    checked = mismatched = 0
    for c in range((n + CHUNK - 1) // CHUNK):
        with open(directory / f"chunk_{c:05d}.pkl", "rb") as f:
            data = pickle.load(f)
        checked += data["checked"]
        mismatched += data["mismatched"]
    return checked, mismatched


# ------------------------------------------------------------------------------------------
# Records


_TRACE_CACHE: dict[str, Any] = {}


def records_of(sw: SynthWorkload, traces: Sequence[str], hw: HardwareKey, n: int, rng: random.Random,
               fail_rate: float = 0.05) -> list[Record]:
    """``n`` records of a workload as a search would leave them: a few failed, the rest with
    run times around a latency that grows with the loop nest's work."""
    base = max(sw.work, 1) * 2 / 40e9  # ~40 GFLOP/s
    out = []
    for r in range(n):
        text = traces[(sw.template + r) % len(traces)]
        trace = _TRACE_CACHE.get(text)
        if trace is None:
            trace = _TRACE_CACHE[text] = json.loads(text)
        prov = Provenance(kind="tuned", trials=r + 1, seconds=0.5 * (r + 1), host="bench", user="bench")
        if rng.random() < fail_rate:
            out.append(Record(sw.key, hw, trace, (), None, sw.args_info, prov))
            continue
        lat = base * rng.lognormvariate(0.0, 0.4) * (1 + 2.0 * rng.random())
        secs = tuple(lat * rng.uniform(0.97, 1.03) for _ in range(3))
        out.append(Record(sw.key, hw, trace, secs, sum(secs) / 3, sw.args_info, prov))
    return out
