"""Zero-trial rungs: a store miss served by a similar stored program, or a predicted one.

With ``tune="never"`` nothing is searched, yet a miss need not fall back to TVM's default
schedule: when the store holds a program of a task of the same operator, layout and sketch at
another size (another model's, another sequence length's, an earlier bridge's), that program is
replayed on the miss as the narrowed search's round 0 does
(:func:`tunecache.search.narrow.replay.replayed_record`): its decisions carried over, the
tiling re-fit to the new extents. Sources come from the store's reuse index
(:func:`tunecache.planning.reuse_sources`), best expected quality first
(:func:`tunecache.reuse.costs.reuse_cost`); a replay that cannot be adapted says why, and the
task falls back. A miss with a prime loop extent its source does not share
(:data:`tunecache.reuse.costs.PRIME_EXTENT_ABOVE`) is not replayed: no tile of the source's divides
it; nor is one whose nearest source is more than :data:`~tunecache.reuse.costs.FAR_RATIO` (8)
times the work away or less: GPT-2's 50,304-column LM head replayed from BERT's 3,072-column
dense (1/22 the work) made the model 1.55x a full search's latency where its predicted program
made it 1.07x (docs/newmodel.md, session 17), and a classifier's 1-row program ran 5x slower
than the prediction on BERT's dense (session 11). Of a source's programs (best first), one that
executes more arithmetic per unit of work on the miss than on its source
(:data:`RECOMPUTE_GROWTH`: a reduction recomputed inside a loop that grew) is passed over for
the next, since its source's latency says nothing of the extra work; so is a replayed matmul
whose machine code keeps its accumulators in memory (:data:`CODE_CHECKED`,
:data:`MEMORY_ACCUMULATORS`), which no measurement of its source could show either.

A miss with nothing to replay gets a program chosen from its own design space without
measuring (:func:`tunecache.search.predict.predict_task`, reported ``predicted``). Replayed and
predicted programs are served, never stored: they were not measured on their task.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tunecache.reuse.conditions import can_reuse
from tunecache.reuse.costs import FAR_RATIO, PRIME_EXTENT_ABOVE, CostModel, prime_extent, reuse_cost
from tunecache.search.narrow.align import UNROLL_KEYS
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Record

__all__ = ["CODE_CHECKED", "HEAVY_UNROLL", "MEMORY_ACCUMULATORS", "NEAR_TIE", "PREDICTION_WINS",
           "PRIME_EXTENT_ABOVE", "PROGRAMS_PER_SOURCE", "RECOMPUTE_GROWTH", "SOURCES_TRIED", "UNTILED_MAX_UNROLL",
           "Replay",
           "cheap_builds_first", "replay_misses", "second_opinion", "unroll_steps"]

log = logging.getLogger("tunecache")

#: Operator families whose replayed programs are built alone before they are served, and passed
#: over for the next when at least :data:`MEMORY_ACCUMULATORS` of their FMAs keep the accumulator
#: in memory (:mod:`tunecache.tvm_layer.codecheck`: BERT's 64-token FFN replayed with one row split
#: ran 5.4 ms against 1.35 ms with another, every FMA loading and storing its accumulator; AMD EPYC
#: Zen 4, session 28). A matmul builds alone in 0.05-0.11 s (BERT's 4-5 checked matmuls: +0.15-0.2 s
#: of wall over two threads, session 29); convolutions (0.2-0.5 s each, 20-50 a CNN) are not checked.
CODE_CHECKED = frozenset({"matmul", "batch_matmul"})
#: Share of a kernel's FMAs with the accumulator in memory from which a replay is passed over.
#: BERT's 64-token FFN over its design space (docs/bench/2026-12-05/memacc_speed.log, side by side,
#: AMD EPYC Zen 4): every variant at or above it ran 3-20x slower than the same task's good splits
#: (1.35-1.41 ms): 48 of 48 FMAs 4.04 ms, 24 of 24 3.68, 16 of 16 28.7, 46 of 48 27.0, 96 of 384
#: (64 accumulators, spilled) 15.1, 14 of 64 (16 rows x 4 vectors, spilled to the stack) 4.10. Of the
#: best 3 measured programs of every tiled workload in session 29's zoo store (177), no matmul has
#: any; convolutions (not checked) up to 72 of 171 (MobileNetV2's depthwise ones). Below it the
#: count says little: tiles of 32 accumulators that spill 1-7 of 96 FMAs ran 2.1-2.4x slower, with
#: an operand rather than an accumulator out of registers.
MEMORY_ACCUMULATORS = 0.2
#: Stored workloads tried per miss, best expected quality first.
SOURCES_TRIED = 3
#: Programs of one source tried (its best first) before the next source.
PROGRAMS_PER_SOURCE = 3
#: A replayed program that executes more than this many times the arithmetic per unit of its
#: task's work than the same program does on its source is passed over for the next one: it
#: recomputes something in a loop whose extent grew, which its source's latency does not show.
#: BERT's softmax at 256 tokens replayed from 128 tokens: the best program's sum over 128
#: partials, recomputed for each output element, was 1.23x the arithmetic per unit of work and
#: ran 31-41 ms against 0.4 ms on its source (LLVM hoists the 64-step sum it fully unrolls at
#: 128 tokens, not the 128-step loop at 256); the source's next program, which does not
#: recompute, 1.1-2.0 ms (AMD EPYC Zen 3, docs/newmodel.md, session 19).
RECOMPUTE_GROWTH = 1.10
#: A source's programs within this fraction of its best latency, or within the best's own
#: re-measured coefficient of variation if larger, are near-tied (their order is within this
#: machine's measurement noise: 5 of BERT's softmax programs within 6%, coefficients of
#: variation 0.17-0.37); among them the one with the shortest explicit unroll is replayed
#: first unless it unrolls :data:`HEAVY_UNROLL` steps or more. A 512-step unroll is what LLVM
#: takes longest over: BERT's softmax program with one built in 2.5-3.0 s alone and made a replay
#: compile 8.6 s of building against 1.3 s (untuned build: 2.5 s; AMD EPYC Zen 3,
#: docs/newmodel.md, session 21).
NEAR_TIE = 0.05
#: Unroll steps from which a near-tied program is replayed after the lighter ones.
HEAVY_UNROLL = 512
#: A replayed program of a task with no tiled block (family ``other``: softmax, layer norm,
#: elementwise) unrolls at most this many steps (the narrowed search's cap for a task worth
#: little, ``search.execute.MINOR_MAX_UNROLL``, and its evidence: the unroll depth moved none of
#: BERT's softmax and layer norm beyond noise, session 24). Session 30's warm store had BERT's
#: softmax best (73.6 us at 128 tokens) unrolled 64 steps around an inlined ``fast_exp``, its
#: next programs 77.6-80.3 us at 64 steps, 83.0 us at 16: replayed at 64 tokens the best built
#: in 45 s alone, the whole replay compile 56 s against 7 s (1.4 s of building with the cap).
UNTILED_MAX_UNROLL = 16
#: A replayed tiled program is swapped for the task's predicted one when the cost model refitted
#: on the store expects the prediction at least this many times as fast; a replay onto a larger
#: problem than its source's is swapped unless the model expects the replay this many times as
#: fast (:func:`second_opinion`). Measured side by side (fastest of 10 rounds): ResNet-18's
#: programs from 224 x 224 replayed at 288 x 288 ran 1.05-6.2x slower than the predictions on 16
#: of its 19 convolutions, at most 16% faster on the other 3; at 160 x 160 from 0.4x to 4.1x the
#: prediction's speed. BERT's matmuls from 128 tokens: at 256 tokens the predictions were as fast
#: or 1.4x faster on all 5, at 64 tokens 1.3-1.6x faster on 3 of 4 and 8% slower on one. The
#: model (268 rows of a ResNet-18 store, 304 of BERT's) expected 1.25x or more either way on 20
#: of those 46 tasks and had the direction right on 19 (wrong: a 1x1 strided conv, 3.4x expected,
#: 0.92x measured); it missed BERT's gains (0.80-0.93x expected where 1.38-1.46x was measured).
#: Onto a larger shape the prediction was as fast or faster on 21 of 24 tasks, hence the default
#: the other way round there (AMD EPYC Zen 3, session 24).
PREDICTION_WINS = 1.25
#: Measured records of tiled programs the store must hold for :func:`second_opinion` to ask its
#: model: below it the model is mostly the shipped one, which ranked ResNet-18's first-stage
#: convolution's replay and prediction the wrong way round (0.42x for a 4.1x) in session 24.
MODEL_MIN_ROWS = 256
#: Newest records and workloads (with tiled programs) the model is refitted on, and rows a
#: workload gives at most (each costs decoding: BERT's 304 rows of 17 workloads took 0.95 s; a
#: team's store is read no further than this). Until session 33 the 32 newest workloads of any
#: kind: on a store ``tunecache warm`` filled with four models they held 94 rows, below
#: :data:`MODEL_MIN_ROWS`, so no replay was ever weighed (ResNet-18 at 288 x 288 from its 224
#: programs: 48.2 ms replayed, 30.8 ms with the opinion). 32 rows a workload give 454 rows of
#: 103 workloads there in ~1.0 s, the same choices as 1,000 newest rows (1.4 s) on ResNet-18
#: at 288 and BERT at 256 tokens.
OPINION_ROWS = 1000
OPINION_WORKLOADS = 128
OPINION_PER_WORKLOAD = 32


@dataclass(frozen=True)
class Replay:
    """How one miss is served without measuring.

    Attributes
    ----------
    key
        The miss's workload key.
    record
        The replayed program as a record of the miss (never stored), ``None`` when nothing
        could be replayed.
    source
        ``str`` of the source workload's key (``None`` when there was none).
    source_name
        The source's task name.
    note
        What was replayed from where, or how the program was predicted, or why neither was.
    how
        ``"replayed"`` (a similar stored program) or ``"predicted"`` (chosen from the task's
        design space without measuring, :mod:`tunecache.search.predict`).
    work
        The miss's iteration-space size (its major loop nest's; 0 when it was not described).
    source_latency_s
        For a replay (or a prediction that replaced one, :func:`second_opinion`): the source
        program's measured latency, scaled by ``work`` over the source's work (an estimate of a
        tuned program's latency on the miss).
    source_work
        For a replay: the source's iteration-space size (0 otherwise).
    """

    key: WorkloadKey
    record: Record | None
    source: str | None
    source_name: str
    note: str
    how: str = "replayed"
    work: float = 0.0
    source_latency_s: float | None = None
    source_work: float = 0.0


def replay_misses(misses: Sequence[Any], target: Any, hw: HardwareKey, store: Any, *,
                  sources: int = SOURCES_TRIED, programs: int = PROGRAMS_PER_SOURCE,
                  predict: bool = True) -> dict[WorkloadKey, Replay]:
    """Serve each miss without measuring: the most similar stored program replayed on it, else a
    program predicted from its own design space.

    Parameters
    ----------
    misses
        Tasks the store has no program for (``key``, ``name``, ``weight``, ``mod``).
    target, hw
        The target and the hardware key whose stored programs may be replayed.
    store
        The store.
    sources, programs
        Stored workloads tried per miss, and programs tried per workload.
    predict
        Give a miss with nothing to replay a predicted program
        (:func:`tunecache.search.predict.predict_task`).

    Returns
    -------
    dict
        Workload key -> :class:`Replay`, one per miss.
    """
    from tunecache.planning import reuse_sources, update_index
    from tunecache.search.narrow.replay import replayed_record
    from tunecache.tvm_layer.bridges import describe_tasks
    from tunecache.tvm_layer.threads import thread_map

    if not misses:
        return {}
    described = describe_tasks([(t.key, t.name, t.weight, t.mod) for t in misses], target)
    extra = update_index(store, hw, target, described)
    skip = {t.key for t in misses}
    cm = CostModel()

    def replay(t: Any, d: Any) -> Replay:
        work = float(d.nest.work)
        near = [s for s in reuse_sources(store, hw, [d], exclude=skip, extra=extra)
                if can_reuse(s.nest, d.nest, s.sketch, d.sketch).ok]
        near.sort(key=lambda s: (reuse_cost(s.nest, d.nest, cm)[1], str(s.key)))
        if not near:
            return Replay(t.key, None, None, "", "no stored program of the same operator, layout and sketch",
                          work=work)
        reasons: list[str] = []
        cap = UNTILED_MAX_UNROLL if d.nest.family == "other" else None
        prime = prime_extent(d.nest.extents, near[0].nest.extents)
        if prime is not None:
            return Replay(t.key, None, str(near[0].key), near[0].name,
                          f"extent {prime} is a prime: no tile of {near[0].name}'s program "
                          f"{list(near[0].nest.extents)} divides it but 1 and itself", work=work)
        ratio = max(work, 1.0) / max(float(near[0].nest.work), 1.0)
        if max(ratio, 1 / ratio) > FAR_RATIO:
            return Replay(t.key, None, str(near[0].key), near[0].name,
                          f"the nearest stored program ({near[0].name} {list(near[0].nest.extents)}) is "
                          f"{max(ratio, 1 / ratio):.0f}x {'less' if ratio > 1 else 'more'} work: few of its "
                          "tiles fit", work=work)
        grown: list[tuple[float, Replay, str]] = []
        passed: list[str] = []  # programs passed over for what LLVM made of them
        for s in near[:sources]:
            source_mod: list[Any] = []  # the source's own module, decoded once if needed
            for rec in cheap_builds_first(store.best_k(s.key, hw, programs)):
                steps = unroll_steps(rec.trace) if cap is not None else 0
                lowered = cap is not None and steps > cap
                try:
                    got = replayed_record(rec, t.mod, t.key, hw, target, max_unroll=cap if lowered else None)
                except Exception as err:  # noqa: BLE001 - one source failing is a reason, not an error
                    got = f"replaying record {rec.uid} failed: {_error_line(err)}"
                if not isinstance(got, Record):
                    reasons.append(f"{s.name}: {got}")
                    continue
                growth = _recompute_growth(rec, got, s.key, source_mod, t, target, store)
                scaled = None if rec.latency_s is None else (
                    rec.latency_s * work / max(float(s.nest.work), 1.0) * max(1.0, growth or 1.0))
                made = Replay(t.key, got, str(s.key), s.name,
                              f"replayed from {s.name} {list(s.nest.extents)} onto {list(d.nest.extents)}"
                              + (f", unrolled {cap} steps, not {steps}" if lowered else "")
                              + ", 0 measurements", work=work, source_latency_s=scaled,
                              source_work=float(s.nest.work))
                if growth is None or growth <= RECOMPUTE_GROWTH:
                    spilled = _accumulators_in_memory(d.nest.family, t.key, got, target)
                    if spilled is not None:
                        passed.append(f"{s.name}'s program {rec.uid[:8]} {spilled}")
                        continue
                    over = [g[2] for g in grown[:1]] + passed[:2]
                    return replace(made, note=f"{made.note}; passed over: {'; '.join(over)}") if over else made
                why_not = (f"{s.name}'s program {rec.uid[:8]} recomputes {growth:.2f}x the arithmetic per unit "
                           "of work here that it does on its source")
                grown.append((growth, replace(made, note=f"{made.note}, although {why_not}"), why_not))
        if grown:
            return min(grown, key=lambda g: g[0])[1]
        return Replay(t.key, None, str(near[0].key), near[0].name,
                      "no similar stored program could be replayed: " + "; ".join([*passed, *reasons][:3]), work=work)

    def serve(item: tuple[Any, Any]) -> Replay:
        t, d = item
        got = replay(t, d)
        return _predict(t, target, hw, got) if got.record is None and predict else got

    # One task per core: replaying a trace and predicting a program are mostly TVM's C++, which
    # releases the GIL (tunecache.tvm_layer.threads).
    served = thread_map(serve, list(zip(misses, described, strict=True)), name="tunecache-replay")
    if predict:
        served = second_opinion(misses, served, target, hw, store)
    out = {t.key: r for t, r in zip(misses, served, strict=True)}
    n = sum(r.how == "replayed" and r.record is not None for r in out.values())
    log.info("tunecache: %d of %d misses served by replaying similar stored programs", n, len(out))
    return out


def opinion_model(store: Any, hw: HardwareKey, *, refit: bool = False) -> Any:
    """The cost model :func:`second_opinion` asks: the one kept in ``store`` for ``hw`` while it
    is fresh, else the shipped model refitted on a sample of the store's records
    (:data:`OPINION_ROWS` ...), which is then kept there (:mod:`tunecache.search.gradient.kept`).

    Parameters
    ----------
    store, hw
        The store and the hardware key.
    refit
        Fit it now even if a fresh one is kept (``tunecache warm`` does at its end).

    Returns
    -------
    tunecache.search.gradient.kept.KeptModel

    Raises
    ------
    tunecache.search.gradient.kept.TooFewRows
        If the store holds fewer than :data:`MODEL_MIN_ROWS` rows of tiled programs.
    """
    from tunecache.search.gradient.kept import fit_and_keep, store_model

    sample = {"limit": OPINION_ROWS, "workloads": OPINION_WORKLOADS, "per_workload": OPINION_PER_WORKLOAD,
              "min_rows": MODEL_MIN_ROWS}
    return fit_and_keep(store, hw, **sample) if refit else store_model(store, hw, **sample)


def second_opinion(misses: Sequence[Any], served: Sequence[Replay], target: Any, hw: HardwareKey, store: Any, *,
                   wins: float | None = None, model: Any = None) -> list[Replay]:
    """``served`` with replayed tiled programs (matmul, conv) swapped for the tasks' predicted ones.

    A replay onto a larger problem than its source's (more work) gives way to the prediction
    unless the store's cost model expects the replay ``wins`` times as fast or more; any other
    replay gives way only where the model expects the prediction ``wins`` times as fast or more
    (:data:`PREDICTION_WINS` says why).

    The model is the gradient search's, refitted on the store's measured records of ``hw`` and
    kept in the store (:func:`opinion_model`; ``model`` replaces it). Where the
    store holds fewer than :data:`MODEL_MIN_ROWS` such records (the replay's note then says so),
    a trace has no tiled sketch, or the prediction fails, the replay stays.

    Parameters
    ----------
    misses
        The tasks, in the order of ``served``.
    served
        What :func:`replay_misses` chose for each.
    target, hw, store
        As for :func:`replay_misses`.
    wins
        How many times as fast the model must expect the prediction to be (the replay, onto a
        larger problem) for it to be served; default :data:`PREDICTION_WINS`.
    model
        A :class:`~tunecache.search.gradient.model.CostModel` to ask instead of the store's.

    Returns
    -------
    list of Replay
        One per miss, in order.
    """
    import math

    from tunecache.tvm_layer.threads import thread_map

    bar = PREDICTION_WINS if wins is None else wins
    # Tasks of a named operator family (``guess_family``: convolutions and matmuls; not
    # ``other``): the ones whose programs may have the multi-level tiling the model reads.
    todo = [i for i, (t, r) in enumerate(zip(misses, served, strict=True))
            if r.how == "replayed" and r.record is not None
            and getattr(getattr(t, "desc", None), "family", "other") != "other"]
    if not todo:
        return list(served)

    def unweighed(why: str) -> list[Replay]:
        # The replays stay, and each one's note (the report's) says it was not weighed, and why.
        log.info("tunecache: %d replayed matmuls and convolutions not weighed against their predicted "
                 "programs: %s", len(todo), why)
        out = list(served)
        for i in todo:
            out[i] = replace(out[i], note=f"{out[i].note}; not weighed against its predicted program: {why}")
        return out

    if model is None:
        from tunecache.search.gradient.kept import TooFewRows

        try:
            model = opinion_model(store, hw).model
        except TooFewRows as err:
            return unweighed(f"no cost model ({err})")
        except Exception as err:  # noqa: BLE001 - no model: the replays stay
            return unweighed(f"no cost model ({_error_line(err)})")

    def weigh(i: int) -> Replay:
        import numpy as np

        from tunecache.search.gradient.training import trace_row
        from tunecache.search.predict import predict_task

        t, r = misses[i], served[i]
        assert r.record is not None
        try:
            got = predict_task(t.mod, t.key, hw, target)
            if isinstance(got, str):
                return r
            rec, how = got
            feats = [trace_row(r.record.trace, 1.0, t.mod), trace_row(rec.trace, 1.0, t.mod)]
            if feats[0] is None or feats[1] is None:
                return r
            replayed, predicted = (float(v) for v in model.predict(np.stack([feats[0][0], feats[1][0]])))
        except Exception:  # noqa: BLE001 - the replay stays
            return r
        ratio = math.exp(replayed - predicted)  # the prediction's expected speed-up over the replay
        what = r.note.removesuffix(", 0 measurements")
        if r.source_work > 0 and r.work > r.source_work:  # grown
            if ratio * bar <= 1.0:
                return replace(r, note=f"{r.note}; kept over the prediction: the store's cost model expects the "
                                       f"replay {1 / ratio:.1f}x as fast")
            why = (f"the miss is {r.work / r.source_work:.1f}x its source's work, and the store's cost model "
                   f"expects it {ratio:.2f}x as fast as the program {what}")
        elif ratio >= bar:
            why = f"the store's cost model expects it {ratio:.1f}x as fast as the program {what}"
        else:
            return r
        # The source's scaled latency stays: a background compile's queue ranks the miss by it.
        return Replay(t.key, rec, None, "", f"{how}; {why}", how="predicted", work=r.work,
                      source_latency_s=r.source_latency_s)

    got = thread_map(weigh, todo, name="tunecache-weigh")
    out = list(served)
    for i, r in zip(todo, got, strict=True):
        out[i] = r
    n = sum(r.how == "predicted" for r in got)
    if n:
        log.info("tunecache: %d of %d replayed matmuls and convolutions served by their predicted programs "
                 "instead", n, len(todo))
    return out


def _error_line(err: BaseException) -> str:
    """``err``'s type and the first line of its message, at most 200 characters of it, for a note."""
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{type(err).__name__}: {first}"


def unroll_steps(trace: Any) -> int:
    """The longest explicit or implicit unroll a stored trace asks for (0 when none).

    MetaSchedule samples it (``SampleCategorical`` over e.g. ``[0, 16, 64, 512]``) and
    annotates a block with the sampled value (``meta_schedule.unroll_explicit``); the trace is
    a record's JSON ``[instructions, decisions]``.
    """
    from tunecache.store.records import decode_trace

    try:
        insts, decisions = decode_trace(trace)
        sampled: dict[str, int] = {}
        for i, d in decisions:
            kind, _inputs, attrs, outputs = insts[i]
            if kind == "SampleCategorical" and outputs and isinstance(d, int):
                sampled[str(outputs[0])] = int(attrs[0][d])
        steps = [sampled.get(str(inputs[1]), 0) if isinstance(inputs[1], str) else int(inputs[1])
                 for kind, inputs, attrs, _outputs in insts
                 if kind == "Annotate" and attrs and str(attrs[0]) in UNROLL_KEYS and len(inputs) > 1]
    except (TypeError, ValueError, IndexError, KeyError):
        return 0  # a trace of another shape: no preference
    return max(steps, default=0)


def cheap_builds_first(records: Sequence[Record], tie: float = NEAR_TIE) -> list[Record]:
    """``records`` (best first) with the near-tied ones (within ``tie`` of the best latency, or
    within the best's coefficient of variation if larger) that unroll :data:`HEAVY_UNROLL` steps
    or more moved after the other near-tied ones (:data:`NEAR_TIE`); the rest keep their order."""
    if not records or records[0].latency_s is None:
        return list(records)
    bound = records[0].latency_s * (1.0 + max(tie, records[0].cv or 0.0))
    tied = [r for r in records if r.latency_s is not None and r.latency_s <= bound]
    rest = [r for r in records if not (r.latency_s is not None and r.latency_s <= bound)]
    return sorted(tied, key=lambda r: unroll_steps(r.trace) >= HEAVY_UNROLL) + rest  # stable: latency order


def _recompute_growth(rec: Record, got: Record, source: WorkloadKey, source_mod: list[Any], task: Any,
                      target: Any, store: Any) -> float | None:
    """How many times the arithmetic per unit of work the program of ``rec`` executes on ``task``
    (replayed: ``got``) against on its own source workload; ``None`` where it cannot be counted.

    Both sides are the same route (the trace replayed and postprocessed) and each is divided by
    its own unscheduled task's count, so a program that recomputes (a reduction inside a loop it
    does not depend on) shows it only where that loop grew. ``source_mod`` caches the decoded
    source module across one source's programs (empty: not decoded yet; ``[None]``: not decodable).
    """
    from tunecache.search.narrow.replay import replay_on
    from tunecache.tvm_layer import scheduled
    from tunecache.tvm_layer.convert import stored_module
    from tunecache.tvm_layer.tir import estimated_flops

    if not source_mod:
        source_mod.append(stored_module(store, source))  # None: nothing to compare against
    mine = scheduled.recall(task.key.shash, got.trace, target)
    if source_mod[0] is None or mine is None:
        return None
    theirs = replay_on(rec, source_mod[0], target)
    counts = [estimated_flops(m) for m in (mine, task.mod, None if theirs is None else theirs.mod, source_mod[0])]
    if any(c is None for c in counts):
        return None
    here, base, there, source_base = (float(c) for c in counts if c is not None)
    return (here / base) / (there / source_base)


def _accumulators_in_memory(family: str, key: WorkloadKey, got: Record, target: Any) -> str | None:
    """Why a replayed program of a :data:`CODE_CHECKED` task must not be served, read from its
    machine code (:func:`tunecache.tvm_layer.codecheck.accumulators_in_memory`), or ``None``."""
    from tunecache.tvm_layer import scheduled
    from tunecache.tvm_layer.codecheck import accumulators_in_memory

    if family not in CODE_CHECKED:
        return None
    mod = scheduled.recall(key.shash, got.trace, target)
    count = None if mod is None else accumulators_in_memory(mod, target)
    if count is None or count.share < MEMORY_ACCUMULATORS:
        return None
    return (f"compiles with {count.in_memory} of its {count.fmas} FMAs loading and storing their "
            "accumulator in memory (LLVM kept the register tile out of registers)")


def _predict(task: Any, target: Any, hw: HardwareKey, missed: Replay) -> Replay:
    """A program for ``task`` chosen from its design space without measuring, or why there is none."""
    from tunecache.search.predict import predict_task

    try:
        got = predict_task(task.mod, task.key, hw, target)
    except Exception as err:  # noqa: BLE001 - a task the rung cannot handle falls back
        got = f"prediction failed: {_error_line(err)}"
    if isinstance(got, str):
        return replace(missed, note=f"{missed.note}; no program predicted: {got}")
    rec, how = got
    return Replay(task.key, rec, None, "", f"{how} (nothing similar replayed: {missed.note})", how="predicted",
                  work=missed.work)
