"""Aligning a source trace with the target's sketch, and replaying it there.

A source (beta) trace is cut at its postprocessing into a :class:`Skeleton` with its sampling
sites. A :class:`Materializer` replays skeletons with given decisions on the target (alpha):
it moves a source onto alpha's own sketch where the two differ only in instructions that sample
nothing or in compute locations (:meth:`Materializer.adapt`, :func:`align_sites`), maps block
names (:func:`map_blocks`), replays and postprocesses. Compute locations the source had no
decision for stay open; :func:`open_picks` chooses them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tunecache.store.records import decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.features import cpu_features, cuda_features

__all__ = [
    "INLINE_ALONG_VECTOR",
    "OPEN_TRIES",
    "UNROLL_KEYS",
    "Candidate",
    "Materializer",
    "Site",
    "Skeleton",
    "align_sites",
    "as_sampled",
    "block_order",
    "cap_unroll",
    "decisions_key",
    "map_blocks",
    "open_locations",
    "open_picks",
    "structure",
]

#: Round 0 measures the best source's replay with this many compute locations for the sites it
#: had no decision for (a ``pad_temp`` the source's sketch did not have): :func:`open_picks`.
OPEN_TRIES = 3

#: :func:`open_picks` inlines first a block that a tiled block reads along its vectorized axis
#: (a depthwise conv's padding); ``False``: the root first for every block.
INLINE_ALONG_VECTOR = True

#: Annotations whose value is a loop's unroll steps: the sampled one, and what postprocessing
#: writes from it.
UNROLL_KEYS = frozenset({"meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit",
                         "pragma_auto_unroll_max_step"})


@dataclass(frozen=True)
class Site:
    """A sampling instruction of a skeleton."""

    index: int
    kind: str  # "tile", "categorical", "compute_location"
    role: str  # tiles: "spatial", "reduction", "other"
    n: int = 0  # tile levels, or categorical choices
    max_innermost: int = -1


class Skeleton:
    """One source trace cut at ``EnterPostproc``, with its sampling sites.

    ``trace`` is validated and copied to plain JSON types (:func:`~tunecache.store.records.decode_trace`)
    unless ``plain``: a trace a store decoded (a :class:`~tunecache.store.records.Record`'s, read
    back) is plain and checked already, and walking it again took 1.5 of 5.8 s of reading a zoo
    store's 1,000 training rows (session 37).
    """

    def __init__(self, source: int, trace: Any, *, plain: bool = False) -> None:
        insts, decisions = trace if plain else decode_trace(trace)
        cut = next((i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc"), len(insts))
        self.source = source
        self.insts: list[Any] = insts[:cut]
        self.decisions: dict[int, Any] = {int(i): v for i, v in decisions if i < cut}
        self.digest = hashlib.sha256(
            json.dumps(self.insts, sort_keys=True).encode()
        ).hexdigest()[:16]
        tiling = ""
        for inst in self.insts:
            if inst[0] == "Annotate" and inst[2] == ["meta_schedule.tiling_structure"]:
                tiling = str(inst[1][1]).strip('"')
        n_s, n_r = tiling.count("S"), tiling.count("R")
        used = _used(self.insts)
        self.sites: dict[int, Site] = {}
        for i, (kind, _inputs, attrs, outputs) in enumerate(self.insts):
            if kind == "SamplePerfectTile" and not any(str(o) in used for o in outputs):
                continue  # a split of literal factors ignores it (a padded row tile): nothing to move
            if kind == "SamplePerfectTile":
                n, mif = int(attrs[0]), int(attrs[1])
                role = "spatial" if n == n_s else "reduction" if n == n_r else "other"
                self.sites[i] = Site(i, "tile", role, n, mif)
            elif kind == "SampleCategorical":
                self.sites[i] = Site(i, "categorical", "", len(attrs[0]))
            elif kind == "SampleComputeLocation":
                self.sites[i] = Site(i, "compute_location", "")
        # The categorical sites that choose a block's unroll depth (their output is the value of
        # an unroll annotation, :data:`UNROLL_KEYS`), with their choices.
        unroll_vars = {str(inst[1][1]) for inst in self.insts
                       if inst[0] == "Annotate" and len(inst[1]) > 1 and inst[2] and str(inst[2][0]) in UNROLL_KEYS}
        self.unroll_sites: dict[int, list[int]] = {
            i: [int(c) for c in attrs[0]] for i, (kind, _inputs, attrs, outputs) in enumerate(self.insts)
            if kind == "SampleCategorical" and outputs and str(outputs[0]) in unroll_vars}

    def trace_json(self, decisions: dict[int, Any]) -> list[Any]:
        """The skeleton's trace JSON ``[instructions, decisions]`` with ``decisions``."""
        return [self.insts, [[i, decisions[i]] for i in sorted(decisions)]]

    @property
    def open_sites(self) -> list[int]:
        """Compute-location sites with no decision from the source (a ``pad_temp`` the source's
        sketch did not have): :func:`open_picks` chooses their locations."""
        return [i for i, site in sorted(self.sites.items())
                if site.kind == "compute_location" and i not in self.decisions]


_GET_BLOCK = ("GetSBlock", "GetBlock")


def _names(value: Any) -> list[str]:
    """The strings (variable names, ``"None"``) in an instruction's inputs, nested lists included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [n for v in value for n in _names(v)]
    return []


def _used(insts: Sequence[Any]) -> set[str]:
    """The names every instruction of ``insts`` takes as input."""
    return {n for _kind, inputs, _attrs, _outputs in insts for n in _names(inputs)}


def structure(insts: Sequence[Any]) -> list[str]:
    """A sketch's instructions without block names, one string each (for comparing sketches).

    Queries whose results nothing uses are left out (a design-space sketch has them, e.g.
    ``GetConsumers`` with no outputs or the loops of an ``RFactor`` block; a tuned trace has them
    simplified away), and variables are renamed in the order they are defined, so the same
    sketch reads the same from either. Without the renaming a simplified trace's numbering
    shifts, and instructions that use different loops can read alike: BERT's softmax trace
    ``Split -> [l12, l13]; RFactor(l13)`` (the inner loop) matched a sketch's
    ``Split -> [l13, l14]; RFactor(l13)`` (the outer loop), and its program replayed on its own
    workload ran 2-4x slower than itself (session 19).
    """
    used = _used(insts)
    rename: dict[str, str] = {}

    def canon(value: Any) -> Any:
        if isinstance(value, str):
            return rename.get(value, value)
        if isinstance(value, list):
            return [canon(v) for v in value]
        return value

    out = []
    for kind, inputs, attrs, outputs in insts:
        if kind.startswith("Get") and not any(o in used for o in outputs):
            continue
        mapped = canon(inputs)
        for o in outputs:
            rename[o] = f"{o[:1]}{len(rename)}"
        out.append(json.dumps([kind, mapped, [] if kind in _GET_BLOCK else attrs, canon(outputs)]))
    return out


def as_sampled(insts: Sequence[Any]) -> list[Any]:
    """``insts`` with every ``Split`` of literal factors given back the outputs of the
    ``SamplePerfectTile`` of its loop that nothing else uses: the sketch it was made from.

    A predicted program covers a prime extent with a padded register tile
    (:func:`tunecache.search.predict.predict_program`: 197 rows as ``[1, None, 1, 8]``), a
    ``Split`` no ``SamplePerfectTile`` can sample; its trace keeps the sampling instruction,
    unused. Compared as sampled, it is alpha's own sketch, so :meth:`Materializer.adapt` keeps
    it as it is: moved onto the sketch, the split took the sampled 197 x 1 x 1 x 1 and ViT-B/16's
    197 x 768 x 3072 dense ran 10.6 ms in a narrowed search's round 0 against 4.2 ms as
    predicted (session 30).
    """
    used = _used(insts)
    out = list(insts)
    for i, (kind, inputs, attrs, outputs) in enumerate(insts):
        if kind != "Split" or not inputs or all(isinstance(x, str) and x != "None" for x in inputs[1:]):
            continue
        sample = next((inst for inst in insts[:i] if inst[0] == "SamplePerfectTile" and inst[1][:1] == inputs[:1]
                       and len(inst[3]) == len(inputs) - 1 and not any(str(o) in used for o in inst[3])), None)
        if sample is not None:
            out[i] = [kind, [inputs[0], *sample[3]], attrs, outputs]
    return out


def block_order(insts: Sequence[Any]) -> list[str]:
    """Distinct block names of a trace's ``GetSBlock`` instructions, in first-use order."""
    out: list[str] = []
    for kind, _inputs, attrs, _outputs in insts:
        if kind in _GET_BLOCK and attrs and str(attrs[0]) not in out:
            out.append(str(attrs[0]))
    return out


def map_blocks(names: Sequence[str], order: Sequence[str]) -> dict[str, str] | None:
    """Map beta's block names to alpha's: ``{}`` if alpha has them all, ``None`` if no mapping.

    Same number of blocks: position by position (same sketch, same visiting order). Otherwise
    (e.g. alpha has one more epilogue block that beta's trace never touched) each missing name
    goes to the first unused alpha name it is a prefix of, or that is a prefix of it
    (``T_sub`` -> ``T_subtract``).
    """
    missing = [n for n in names if n not in order]
    if not missing:
        return {}
    if len(order) == len(names):
        return {b: a for b, a in zip(names, order, strict=False) if b != a}
    free = [a for a in order if a not in names]
    mapping = {}
    for n in missing:
        match = next((a for a in free if a.startswith(n) or n.startswith(a)), None)
        if match is None:
            return None
        mapping[n] = match
        free.remove(match)
    return mapping


def align_sites(beta: Sequence[Any], alpha: Sequence[Any]) -> list[tuple[int, int]]:
    """Pairs ``(beta index, alpha index)`` of the sampling instructions two sketches share.

    The two lists of sampling instructions (kind and structural attributes:
    :func:`~tunecache.tvm_layer.sketch.site_lines`) are matched in order; an instruction one sketch
    has and the other lacks (a compute location) is left out.
    """
    from tunecache.tvm_layer.sketch import SAMPLE_KINDS, site_lines

    b_sites = [i for i, inst in enumerate(beta) if inst[0] in SAMPLE_KINDS]
    a_sites = [i for i, inst in enumerate(alpha) if inst[0] in SAMPLE_KINDS]
    matcher = difflib.SequenceMatcher(None, site_lines(beta), site_lines(alpha), autojunk=False)
    return [(b_sites[blk.a + k], a_sites[blk.b + k]) for blk in matcher.get_matching_blocks() for k in range(blk.size)]


def cap_unroll(skeleton: Skeleton, decisions: dict[int, Any], max_unroll: int) -> dict[int, Any]:
    """``decisions`` with each unroll choice of ``skeleton`` above ``max_unroll`` steps lowered to
    the largest one at or below it (the first choice when none is).

    LLVM's time grows with the unroll depth: BERT's softmax program from its 128-token search
    (``auto_unroll_max_step`` 512 around an inlined ``fast_exp``) took 5-7 s to build at 64
    tokens, 0.5 s unrolled 16 steps, and ran as fast (session 24).
    """
    out = dict(decisions)
    for idx, choices in skeleton.unroll_sites.items():
        at = out.get(idx)
        if isinstance(at, int) and 0 <= at < len(choices) and choices[at] > max_unroll:
            fits = [c for c, v in enumerate(choices) if v <= max_unroll]
            out[idx] = max(fits, key=lambda c: choices[c]) if fits else 0
    return out


def decisions_key(digest: str, decisions: dict[int, Any]) -> str:
    """A key for one candidate: its skeleton (``Skeleton.digest``) and its decisions.

    Parameters
    ----------
    digest
        The skeleton's :attr:`Skeleton.digest`.
    decisions
        Sampling-site index -> decision.

    Returns
    -------
    str
        Equal for two candidates exactly when both are equal (decisions in index order).

    Examples
    --------
    >>> decisions_key("abc", {3: [4, 2], 1: 0})
    'abc[[1, 0], [3, [4, 2]]]'
    """
    return digest + json.dumps(sorted(decisions.items()))


@dataclass
class Candidate:
    """A skeleton replayed on alpha and postprocessed: one program to rank, build and measure.

    ``features`` (:mod:`tunecache.tvm_layer.features`, ``None`` if they could not be read) and
    ``cost`` rank it; ``samples`` are its measured median run times, ``latency_s`` the first of
    them, or their median once re-measured; ``trial`` its 0-based place among the search's
    measured candidates (the order they were committed in), once measured.
    """

    skeleton: Skeleton
    decisions: dict[int, Any]  # as TVM applied them on alpha
    sch: Any
    features: Any
    cost: float = 0.0
    latency_s: float | None = None
    samples: list[float] = field(default_factory=list)
    trial: int | None = None


class Materializer:
    """Replays skeletons with given decisions on alpha and runs the target's postprocessors."""

    def __init__(self, mod: Any, target: Any, seed: int, sketches: list[list[Any]] | None = None) -> None:
        """``sketches``: alpha's design-space sketches (trace JSON instructions) when the caller
        has them already (generating them again costs ~0.02 s a task)."""
        load_tvm(str(target.kind.name))
        from tvm.s_tir import meta_schedule as ms

        self.mod = mod
        self.target = target
        self.seed = seed % (2**31 - 1) + 1
        ctx = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator=ms.space_generator.PostOrderApply(
                sch_rules=[], postprocs="from-target", mutator_probs={}
            ),
            task_name="narrowed",
        )
        self.postprocs = list(ctx.space_generator.postprocs)
        self.is_cuda = str(target.kind.name) == "cuda"
        self.failed_replay = 0
        self.failed_postproc = 0
        self._alpha_sketches: list[list[Any]] | None = sketches
        self._renamed: dict[str, list[Any]] = {}

    def alpha_sketches(self) -> list[list[Any]]:
        """The instructions of each of alpha's design-space sketches (trace JSON)."""
        if self._alpha_sketches is None:
            from tunecache.tvm_layer.sketch import design_space_json

            try:
                self._alpha_sketches = [decode_trace(t)[0] for t in design_space_json(self.mod, self.target)]
            except Exception:  # noqa: BLE001 - no design space: sources are replayed as they are
                self._alpha_sketches = []
        return self._alpha_sketches

    def alpha_block_orders(self) -> list[list[str]]:
        """Block names of alpha in the order each of its design-space sketches first gets them."""
        return [block_order(insts) for insts in self.alpha_sketches()]

    def adapt(self, skeleton: Skeleton) -> Skeleton:
        """``skeleton`` in a form that replays on alpha.

        Itself, when one of alpha's sketches has its structure (block names aside: see
        :meth:`insts_for_alpha`). Otherwise, when beta's sketch differs from alpha's only in
        instructions that sample nothing (alpha has a fused residual ``add``/``relu`` to inline
        that beta had not, or the other way round) or in compute locations one of them samples
        and the other does not (:data:`~tunecache.tvm_layer.sketch.OPEN_KINDS`: a padded 3x3 conv's
        ``pad_temp``), alpha's own sketch that samples the same decisions (the closest in
        structure when several do; one with exactly beta's sampling instructions first) carrying
        beta's decisions. Sampling instructions are matched in order (:func:`align_sites`);
        alpha's sites beta had no decision for stay open (:attr:`Skeleton.open_sites`).
        Itself when there is none: its replay then fails and is counted.
        """
        from tunecache.tvm_layer.sketch import decision_text, reuse_text

        own = structure(as_sampled(skeleton.insts))
        sketches = self.alpha_sketches()
        if not sketches or any(structure(a) == own for a in sketches):
            return skeleton
        text = decision_text(skeleton.insts)
        same = [a for a in sketches if decision_text(a) == text]
        if not same:
            same = [a for a in sketches if reuse_text(decision_text(a)) == reuse_text(text)]
        if not same:
            return skeleton
        alpha = max(same, key=lambda a: difflib.SequenceMatcher(None, own, structure(a), autojunk=False).ratio())
        decisions = [[a, skeleton.decisions[b]] for b, a in align_sites(skeleton.insts, alpha)
                     if b in skeleton.decisions]
        return Skeleton(skeleton.source, [alpha, decisions])

    def insts_for_alpha(self, skeleton: Skeleton) -> list[Any]:
        """``skeleton``'s instructions with its block names mapped to alpha's.

        A TE-built task (e.g. a bridge operator) and a Relax-built one of the same computation
        name their blocks differently (``T_sub`` / ``T_subtract``); the sketch signature ignores
        names, the replay does not. With the same sketch, both traces get their blocks in the
        same order, so the k-th block of beta's trace is the k-th of alpha's sketch.
        """
        cached = self._renamed.get(skeleton.digest)
        if cached is not None:
            return cached
        insts = skeleton.insts
        names = block_order(insts)
        for order in self.alpha_block_orders():
            mapping = map_blocks(names, order)
            if mapping is None:
                continue
            if mapping:
                insts = [[k, i, [mapping.get(a[0], a[0]), *a[1:]], o] if k in _GET_BLOCK and a else [k, i, a, o]
                         for k, i, a, o in insts]
            break
        self._renamed[skeleton.digest] = insts
        return insts

    def replay(self, skeleton: Skeleton, decisions: dict[int, Any], *,
               probe: bool = False) -> tuple[Any, dict[int, Any]] | None:
        """Replay without postprocessing; return ``(schedule, applied decisions)`` or ``None``.

        A failure is counted in :attr:`failed_replay` unless ``probe`` (a replay that only asks
        TVM what it would apply, e.g. :func:`open_locations`)."""
        from tvm.s_tir.schedule import Schedule, Trace

        sch: Any = None
        applied: Any = ()
        try:
            sch = Schedule(self.mod, seed=self.seed)
            trace = [self.insts_for_alpha(skeleton), [[i, decisions[i]] for i in sorted(decisions)]]
            Trace.apply_json_to_schedule(trace, sch)
            insts, applied = decode_trace(sch.trace.as_json())
        except Exception:  # noqa: BLE001 - a trace that does not fit alpha is data
            insts = None
        if insts is None or len(insts) != len(skeleton.insts):
            if not probe:
                self.failed_replay += 1
            return None
        return sch, {int(i): v for i, v in applied}

    def materialize(self, skeleton: Skeleton, decisions: dict[int, Any]) -> Candidate | None:
        """Replay ``skeleton`` with ``decisions``, postprocess, and read its features.

        Returns the :class:`Candidate` (with the decisions TVM really applied), or ``None`` when
        the replay or a postprocessor fails (counted in :attr:`failed_replay` and
        :attr:`failed_postproc`).
        """
        out = self.replay(skeleton, decisions)
        if out is None:
            return None
        sch, applied = out
        try:
            sch.enter_postproc()
            ok = all(p.apply(sch) for p in self.postprocs)
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            self.failed_postproc += 1
            return None
        try:
            feats = cuda_features(sch) if self.is_cuda else cpu_features(sch)
        except Exception:  # noqa: BLE001 - features only rank candidates
            feats = None
        return Candidate(skeleton, applied, sch, feats)


def open_locations(mat: Materializer, skeleton: Skeleton, applied: dict[int, Any], idx: int) -> list[int]:
    """The compute locations TVM accepts at open site ``idx`` of ``skeleton`` on alpha, given
    the other decisions ``applied``.

    A location is an index into the loops a block may be computed at (``-1`` its root, ``-2``
    inlined); TVM replays an index it rejects as a nearby accepted one, so every index up to the
    number of instructions (more than there are loops) is tried and the results de-duplicated.
    """
    found: list[int] = []
    for value in range(-2, len(skeleton.insts)):
        got = mat.replay(skeleton, {**applied, idx: value}, probe=True)
        location = None if got is None else got[1].get(idx)
        if location is not None and location not in found:
            found.append(int(location))
    return found


def _inline_first(mat: Materializer, skeleton: Skeleton, idx: int) -> bool:
    """Whether open site ``idx`` computes a block that a tiled block of ``skeleton`` reads along
    its vectorized axis (a depthwise conv's padding), read from alpha's TIR."""
    from tunecache.tvm_layer.tir import reads_along_innermost

    if not INLINE_ALONG_VECTOR:
        return False
    insts = mat.insts_for_alpha(skeleton)
    names = {str(out[0]): str(attrs[0]) for kind, _ins, attrs, out in insts if kind in _GET_BLOCK and attrs and out}
    block = names.get(str(insts[idx][1][0])) if insts[idx][1] else None
    tiled = [names.get(str(ins[0])) for kind, ins, attrs, _out in insts
             if kind == "Annotate" and attrs == ["meta_schedule.tiling_structure"] and ins]
    if block is None:
        return False
    try:
        return any(reads_along_innermost(mat.mod, t, block) for t in tiled if t)
    except Exception:  # noqa: BLE001 - a TIR it cannot read keeps the default order
        return False


def open_picks(mat: Materializer, skeleton: Skeleton, applied: dict[int, Any], count: int) -> list[dict[int, Any]]:
    """Up to ``count`` decision sets for ``skeleton``'s open sites, in the order to try them.

    The source had no decision for these sites (a padded conv's ``pad_temp`` when the source was
    a 1x1 conv). Left to TVM, replay samples one at random: it inlined the padding, 1.3-2.9x
    slower than the best location on three resnet50 3x3 convs reusing a 1x1 conv's program (two
    source programs; ``tools/bench_locations.py``), while no single other location was best.
    So: the block's root (one padded copy of the input), the deepest loop (pad per innermost
    tile), then the middle of the loop locations; inlining only when nothing else is accepted.
    The best of those three was within 1.6% of the best location in all six measurements.

    Except where the tiled block reads the padded input along its vectorized axis (a depthwise
    conv: :func:`~tunecache.tvm_layer.tir.reads_along_innermost`): there inlining comes first,
    one condition for a whole vector load and no copy of the input. MobileNetV2's seven
    depthwise convs, their stored programs' tiles with each location (AMD Zen 3, interleaved):
    inlined 0.55-0.84x the root's time (0.138 vs 0.250 ms on the 112x112 stride-2 one) and the
    fastest or within 5% of it; ResNet-18's dense 3x3 convs and MobileNetV2's 3-channel stem,
    which read the padding as scalars, ran 1.0-1.6x slower inlined.
    """
    orders = {}
    for idx in skeleton.open_sites:
        first = [-2] if _inline_first(mat, skeleton, idx) else []
        if count == 1:  # the first accepted of these wins: no need to probe the rest
            for loc in [*first, -1]:
                got = mat.replay(skeleton, {**applied, idx: loc}, probe=True)
                if got is not None and got[1].get(idx) == loc:
                    orders[idx] = [loc]
                    break
            if idx in orders:
                continue
        locations = open_locations(mat, skeleton, applied, idx)
        loops = sorted(x for x in locations if x >= 0)
        order = ([-2] if first and -2 in locations else []) + ([-1] if -1 in locations else []) \
            + ([loops[-1], loops[len(loops) // 2]] if loops else [])
        orders[idx] = list(dict.fromkeys(order)) or locations
    picks: list[dict[int, Any]] = []
    for rank in range(count):
        chosen = {**applied, **{idx: order[min(rank, len(order) - 1)] for idx, order in orders.items() if order}}
        if chosen not in picks:
            picks.append(chosen)
    return picks
