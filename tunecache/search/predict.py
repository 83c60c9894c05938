"""A program for a task without measuring anything: MetaSchedule's sketches, decisions set by rule.

With ``tune="never"`` a miss with no stored program to replay used to fall back to TVM's default
schedule, a naive loop nest (BERT's 128x768 by 768x3072 dense: 273 ms against PyTorch's 8 ms,
issue 24). This module is the rung between a replay and that fallback: it generates the task's
design space (the same sketches a search would sample, ``post-order-apply``) and sets every
sampled decision analytically, from the target and the host's caches, instead of at random:

* **tiles** (``SamplePerfectTile`` of a multi-level tiling, ``SSRSRS`` on CPU): the innermost
  tile of the last spatial axis is :data:`VECTORS` SIMD widths in elements (``avx512f``: 16
  floats, ``avx2``: 8; one vector measured 2.4x slower on BERT's dense), a multiple of the
  width where one divides the axis, else at most one vector (28 or 56 floats with 16-float
  vectors ran 7-13x slower than 8 or 14 on NCHW convolutions); the innermost tile of a row
  axis a few rows (:data:`ROWS`), so the register tile is ``ROWS`` vectors of accumulators.
  The row axis is one that the reads along the vector axis do not use, so one vector load
  feeds every row (an NCHW conv's output channels, a dense's rows), else the spatial axis
  before the vector axis (image rows: MobileNetV2's NCHW 1x1 convs ran 5-20x slower with it).
  The inner reduction tile is sized so that one step's panels fit half of L1; the outermost
  tiles give at least :data:`PAR_PER_CORE` parallel items per physical core (outer axes
  first), and the rest goes to the second level, where the parallel postprocessor does not
  fuse it. A panel beyond :data:`SPLIT_WEIGHTS_ABOVE` L2 caches (a late conv's weights) is
  split by its columns instead, and where the register tile has few rows (a 7x7 conv's output
  columns) it gets up to :data:`MAX_VECTORS` vectors and all the block's rows inside one
  outer-reduction step (ResNet-18's last stage: 4.4 -> 1.6-2.1 ms, session 25); with one row and
  no stride, the kernel window inside the inner reduction tile too, and the step's slice of
  weights sized to :data:`FEW_ROWS_PANEL_L1` of L1 (session 43);
* other tiles (an ``rfactor`` split): the inner part a SIMD width;
* **unroll** (``SampleCategorical``): :data:`UNROLL` (a middle value of ``[0, 16, 64, 512]``);
* **compute locations**: the block's root where TVM accepts it (as a replay's open sites:
  :func:`~tunecache.search.narrow.align.open_picks`), inlining only when nothing else is, or
  where the tiled block reads it along its vector axis (a depthwise conv's padding: inlined).

One candidate per sketch is replayed and postprocessed with the repository's
:class:`~tunecache.search.narrow.align.Materializer`; a static score of the postprocessed TIR
(:func:`~tunecache.tvm_layer.features.cpu_features`: enough parallel items, for a tiled block
the fewest loop nests at the root (an epilogue fused, not a second pass over the output), a
full vector width, working sets within L1 and L2, the epilogue fused at the outer tile) picks
one. Nothing is built or run. The cache sizes are this host's (a cross-compile gets this
host's, not the target's); the constants were set by interleaved measurements on one AVX-512
Xeon (``tools/bench_zero_trial.py``, ``docs/zero_trial.md``).
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any

from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Provenance, Record, decode_trace

__all__ = [
    "PAR_PER_CORE",
    "PROVENANCE_KIND",
    "ROWS",
    "UNROLL",
    "CacheSizes",
    "Prediction",
    "cache_sizes",
    "predict_program",
    "predict_task",
    "predicted_record",
    "predicted_trace",
]

#: Provenance kind of a predicted record.
PROVENANCE_KIND = "predicted"
#: Rows of the register tile (innermost tile of the spatial axis before the vector axis);
#: ``None``: 8 with 512-bit vectors (32 vector registers), else 4, so that the ``ROWS x VECTORS``
#: accumulators take half the vector registers.
ROWS: int | None = None
#: Bytes of a matmul's column panel (reduction x columns) above which the columns, not the rows,
#: are split between the cores (larger than the last-level cache of the CPUs measured).
STREAM_WEIGHTS_ABOVE = 64 << 20
#: A panel (reduction x columns: a conv's or dense's weights) larger than this many L2 caches is
#: split between the cores by its columns (the parallel loop over the vector axis first), so each
#: core reads its share of it, not all of it; where its register tile has few rows (a 7x7 or
#: 14x14 conv's output columns) it also gets more vectors and every output row of the core's
#: block inside one outer-reduction step (:func:`_tile_group`). ``inf``: neither.
#: Predicted conv and dense kernels side by side (session 25, Zen 3, weighted sums of the
#: kernels it changes): ResNet-18 23.0 -> 11.0 ms, ResNet-50 43.6 -> 27.5, BERT-2L 31.4 -> 27.7,
#: MobileNetV2 1.55 -> 0.75; VGG-16 and GPT-2 within 1%.
SPLIT_WEIGHTS_ABOVE = 2.0
#: Where the last reduction axis sits wholly inside the inner reduction tile (a stem conv's 3
#: input channels), bring the axes before it inside too (:func:`_tile_group`). Predicted stems,
#: side by side (session 25, Zen 3): ResNet-18 3.0 -> 1.34 ms, ResNet-50 3.2 -> 1.5, VGG-16
#: 3.0 -> 1.7, MobileNetV2 0.48 -> 0.22, ViT's 16x16 patches 2.0 -> 1.55; depthwise convs as fast.
INNER_REDUCTION_ALL = True
#: Share of L1 that one inner-reduction step's slice of a few-rows split panel may take (a 7x7
#: conv's weights: kernel window x inner input channels x the register tile's output channels),
#: with the kernel window inside the inner tile and no middle tile along the columns
#: (:func:`_tile_group`); only where the register tile has one row and the input is read
#: without a stride. ResNet-18's 7x7x512 3x3 conv, one thread, side by side (session 43, Zen 3):
#: window outside, 16 channels a step 1.08-1.22x the stored best; window inside with 8 channels
#: (18 KB of 32) 0.87-0.93x; 16 channels (37 KB) 1.37-1.45x. Predicted, two threads: the three
#: such convs 1.84 / 2.35 / 1.86 -> 1.75 / 1.75 / 1.82 ms (medians). Where the tile has two rows
#: (14x14x256) the same rule ran 1.00-1.14x as long, where the conv has a stride of 2 1.09-1.17x:
#: not applied there. ``0``: the rule is off.
FEW_ROWS_PANEL_L1 = 0.75
#: Where the register tile is left with 1 row (a 7-wide output: no divisor near the rows wanted),
#: choose its rows and vectors again to hold up to ``ROWS x VECTORS`` accumulators
#: (:func:`_tile_group`; 7 x 1 on AVX2). Side by side (session 26, Zen 3, medians): MobileNetV2's
#: five such kernels 2.15 -> 0.92 ms weighted, ResNet-18's 7x7 downsample 0.36 -> 0.13.
#: ``False``: keep the 1-row tile.
FILL_ACCUMULATORS = True
#: Where the row axis' divisor stops short of the rows wanted (a 14-wide output: 2 rows), take
#: the rest of the register tile's rows from the spatial axis before it (:func:`_tile_group`).
ROWS_FROM_TWO_AXES = True
#: Vectors of the register tile along the vector axis (innermost tile = VECTORS x SIMD width).
VECTORS = 2
#: Most vectors of a split panel's register tile when its row axis gives few rows (a 7x7 conv's
#: output columns), so that it keeps ``ROWS x VECTORS`` accumulators.
MAX_VECTORS = 8
#: Register tiles per outer-reduction step along the row and vector axes (second-innermost level).
MID = 2
#: Parallel items wanted per physical core (the outermost tiles' product).
PAR_PER_CORE = 4
#: Padding a row axis may add at most this share of rows to get a full register tile.
PAD_WASTE = 0.125
#: Postprocessors (by class name) that candidates are ranked without; only the chosen program
#: gets them (:func:`predict_program`).
SCORED_WITHOUT: frozenset[str] = frozenset({"RewriteLayout"})

#: The unroll step chosen among ``SampleCategorical``'s candidates (the nearest one).
UNROLL = 64


@dataclass(frozen=True)
class CacheSizes:
    """Per-core data cache sizes in bytes."""

    l1: int = 32 * 1024
    l2: int = 512 * 1024


@functools.lru_cache(maxsize=1)
def cache_sizes() -> CacheSizes:
    """The host's L1 data and L2 sizes from ``/sys/devices/system/cpu/cpu0/cache`` (defaults:
    32 KiB and 512 KiB where it cannot be read)."""
    from tunecache.tvm_layer.target import cache_bytes

    found = cache_bytes()
    d = CacheSizes()
    return CacheSizes(found.get(1, d.l1), found.get(2, d.l2))


@dataclass(frozen=True)
class Prediction:
    """The program :func:`predict_program` chose.

    Attributes
    ----------
    sch
        The postprocessed ``tvm.s_tir.Schedule`` (its ``trace`` is the program).
    how
        One line: which sketch, which decisions, and why.
    sketch
        Index of the chosen sketch in the task's design space.
    decisions
        Sampling-site index -> the decision TVM applied.
    """

    sch: Any
    how: str
    sketch: int
    decisions: dict[int, Any]


# --------------------------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _largest_divisor(n: int, cap: float) -> int:
    """The largest divisor of ``n`` that is at most ``cap`` (at least 1)."""
    return max((d for d in _divisors(n) if d <= cap), default=1)


def _nearest_divisor(n: int, want: int) -> int:
    """The divisor of ``n`` closest to ``want`` (on a log scale; the larger on a tie)."""
    return min(_divisors(n), key=lambda d: (abs(math.log(d / want)), -d))


def _lanes(target: Any, bits: int = 32) -> int:
    from tunecache.search.narrow.search import _simd_lanes

    try:
        return _simd_lanes(target, bits)
    except Exception:  # noqa: BLE001 - not an x86 target: 128-bit vectors
        return max(1, 128 // bits)


def _cores(target: Any) -> int:
    try:
        n = int(target.attrs.get("num-cores", 0) or 0)
    except Exception:  # noqa: BLE001
        n = 0
    if n <= 0:
        from tunecache.tvm_layer.target import physical_cores

        n = physical_cores()
    return max(1, n)


@dataclass
class _TileGroup:
    """The tile sites of one block's loops (one ``GetLoops``), in loop order."""

    spatial: list[tuple[int, int]]  # (site index, extent)
    reduction: list[tuple[int, int]]
    block: str = ""  # the tiled block's name ("" if not found)
    loops: list[str] | None = None  # the GetLoops outputs, in loop order


def _tile_groups(insts: list[Any], decisions: dict[int, Any], sites: dict[int, Any]) -> list[_TileGroup]:
    """Group the multi-level tiling sites by the ``GetLoops`` that produced their loops."""
    producer: dict[str, int] = {}
    block_of: dict[str, str] = {}
    for i, (kind, _inputs, attrs, outputs) in enumerate(insts):
        if kind == "GetLoops":
            for o in outputs:
                producer[str(o)] = i
        elif kind in ("GetSBlock", "GetBlock") and attrs and outputs:
            block_of[str(outputs[0])] = str(attrs[0])
    groups: dict[int, _TileGroup] = {}
    for idx, site in sorted(sites.items()):
        if site.kind != "tile" or site.role not in ("spatial", "reduction") or idx not in decisions:
            continue
        loop = str(insts[idx][1][0])
        at = producer.get(loop, -1)
        if at not in groups:
            block = block_of.get(str(insts[at][1][0]), "") if at >= 0 and insts[at][1] else ""
            groups[at] = _TileGroup([], [], block, [str(o) for o in insts[at][3]] if at >= 0 else None)
        g = groups[at]
        extent = math.prod(int(x) for x in decisions[idx])
        (g.spatial if site.role == "spatial" else g.reduction).append((idx, extent))
    return list(groups.values())


def _sblock(mod: Any, block: str) -> Any:
    """The ``SBlock`` named ``block`` in ``mod`` (the task), or ``None`` where it is not found;
    looked up once a tile group and read by :func:`_site_reads` and :func:`_strided_reads`."""
    if mod is None or not block:
        return None
    try:
        from tvm.s_tir import Schedule

        sch = Schedule(mod)
        return sch.get(sch.get_sblock(block))
    except Exception:  # noqa: BLE001 - no block information: the defaults
        return None


def _strided_reads(blk: Any) -> bool:
    """Whether a read of the block ``blk`` indexes with a spatial iterator times a constant
    above 1 (a stride-2 conv's input, ``yy * 2 + ry``)."""
    try:
        from tunecache.tvm_layer import load_tvm

        tvm = load_tvm()
        spatial = {str(iv.var.name) for iv in blk.iter_vars if int(iv.iter_type) == 0}
        stack = [rng.min for region in blk.reads for rng in region.region]
        while stack:
            e = stack.pop()
            if isinstance(e, tvm.tirx.Mul):
                for var, c in ((e.a, e.b), (e.b, e.a)):
                    if (isinstance(var, tvm.tirx.Var) and str(var.name) in spatial
                            and isinstance(c, tvm.tirx.IntImm) and int(c.value) > 1):
                        return True
            stack.extend(sub for sub in (getattr(e, "a", None), getattr(e, "b", None)) if sub is not None)
        return False
    except Exception:  # noqa: BLE001 - no block information: not known to be strided
        return False


def _block_reads_by_axis(blk: Any) -> list[frozenset[int]] | None:
    """For each iterator of the block ``blk`` (in order), the indices of the block's reads whose
    index expressions use it; ``None`` if they cannot be read."""
    try:
        from tunecache.tvm_layer.features import _free_vars

        used: list[set[str]] = []
        for region in blk.reads:
            names: set[str] = set()
            for rng in region.region:
                names.update(str(v.name) for v in _free_vars(rng.min))
            used.append(names)
        return [frozenset(i for i, names in enumerate(used) if str(iv.var.name) in names)
                for iv in blk.iter_vars]
    except Exception:  # noqa: BLE001 - no block information: the default row axis
        return None


def _site_reads(g: _TileGroup, insts: list[Any], blk: Any) -> dict[int, frozenset[int]] | None:
    """Site index -> the reads (by index) that the site's loop's iterator appears in (``blk``:
    the group's block, :func:`_sblock`)."""
    if blk is None or g.loops is None:
        return None
    by_axis = _block_reads_by_axis(blk)
    if by_axis is None or len(by_axis) != len(g.loops):
        return None
    out: dict[int, frozenset[int]] = {}
    for idx, _ in g.spatial + g.reduction:
        loop = str(insts[idx][1][0])
        if loop in g.loops:
            out[idx] = by_axis[g.loops.index(loop)]
    return out


def _vector_tile(extent: int, lanes: int) -> int:
    """The innermost tile of the vector axis: up to :data:`VECTORS` whole SIMD vectors (a
    multiple of the width) where one divides the extent, else at most one vector.

    A vectorized loop longer than a vector but not a multiple of it (28 or 56 floats with
    16-float vectors) ran 7-13x slower than 8 or 14 on MobileNetV2's NCHW 1x1 convolutions.
    """
    whole = [d for d in _divisors(extent) if d % lanes == 0 and d <= lanes * VECTORS]
    if whole:
        return max(whole)
    return _largest_divisor(extent, lanes)


def _tile_group(g: _TileGroup, n_s: int, lanes: int, cores: int, caches: CacheSizes,
                dtype_bytes: int = 4, reads: dict[int, frozenset[int]] | None = None,
                strided: bool = False) -> dict[int, list[int]]:
    """Analytic tiles for one multi-level-tiled block (``n_s`` spatial levels, 2 reduction).

    ``reads`` (site -> the reads its iterator indexes) chooses the register tile's row axis:
    an axis that the reads along the vector axis do not use, so that one vector load feeds a
    whole column of accumulators (an NCHW conv's output channels, not its rows); without one,
    the spatial axis before the vector axis. ``strided``: the block reads an input with a
    stride (see :data:`FEW_ROWS_PANEL_L1`).
    """
    out: dict[int, list[int]] = {}
    ext = {idx: e for idx, e in g.spatial}
    t = {idx: [1] * n_s for idx, _ in g.spatial}
    real = [idx for idx, e in g.spatial if e > 1]
    vec = real[-1] if real else None
    row = real[-2] if len(real) > 1 else None
    if vec is not None and reads is not None and vec in reads:
        free = [idx for idx in real if idx != vec and idx in reads and not reads[idx] & reads[vec]]
        if free:
            row = free[-1]
    rem = dict(ext)
    padded_row = False
    # Rows of the register tile wanted with VECTORS vectors (half the vector registers hold
    # ROWS x VECTORS accumulators); rows_wanted is adjusted below for a narrower vector tile.
    wide = lanes * 8 * dtype_bytes >= 512  # 512-bit vectors: 32 vector registers, else 16
    base_rows = ROWS if ROWS is not None else (8 if wide else 4)
    rows_wanted = base_rows
    # Register tile: innermost level.
    if vec is not None:
        t[vec][-1] = _vector_tile(ext[vec], lanes)
        rem[vec] //= t[vec][-1]
    vec_looped = False
    if vec is not None and n_s >= 3 and 2 * t[vec][-1] < lanes < ext[vec]:
        # No divisor of half a vector or more (ViT's 197 keys, a prime, in Q x K^T): the whole
        # axis as one loop inside the outer reduction tile, which LLVM vectorizes with a
        # remainder; rows with no divisor near 8 likewise, and a reduction tile of 2. This is
        # what a full search found for ViT's 12x197x64 by 12x64x197 batch matmul (0.26 ms); the
        # 1-wide vector tile it replaces ran 2.1 ms (session 17).
        t[vec][-1], t[vec][-2], rem[vec] = 1, ext[vec], 1
        vec_looped = True
    if row is not None and vec_looped:
        rows_wanted = 8  # up to 8 rows of accumulators; rows with no divisor near it are looped whole
        if 2 * _largest_divisor(ext[row], rows_wanted) <= rows_wanted < ext[row]:
            t[row][-2], rem[row] = ext[row], 1
        else:
            t[row][-1] = _largest_divisor(ext[row], rows_wanted)
            rem[row] //= t[row][-1]
    elif row is not None:
        if vec is not None and t[vec][-1] % lanes == 0 and t[vec][-1] < lanes * VECTORS:
            rows_wanted = rows_wanted * lanes * VECTORS // t[vec][-1]  # as many accumulators
        t[row][-1] = _largest_divisor(ext[row], rows_wanted)
        rem[row] //= t[row][-1]
        padded = math.ceil(ext[row] / rows_wanted) * rows_wanted
        if 2 * t[row][-1] <= rows_wanted < ext[row] and padded <= ext[row] * (1 + PAD_WASTE):
            # No divisor near the rows wanted (197 tokens, prime): a full register tile over a
            # row axis padded to its multiple (see _imperfect_splits), not a 1-row tile.
            t[row][-1], rem[row] = rows_wanted, padded // rows_wanted
            padded_row = True
    k = math.prod(e for _, e in g.reduction)
    panel = k * ext[vec] * dtype_bytes if vec is not None else 0
    weights_streamed = (vec is not None and row is not None and not padded_row and not vec_looped
                        and n_s >= 3 and panel > STREAM_WEIGHTS_ABOVE)
    weights_split = (not weights_streamed and vec is not None and row is not None and not padded_row
                     and not vec_looped and n_s >= 3 and panel > SPLIT_WEIGHTS_ABOVE * caches.l2)
    few_rows = False
    if weights_split and row is not None and vec is not None:
        acc_wanted = base_rows * VECTORS
        few_rows = t[vec][-1] % lanes == 0 and 2 * t[row][-1] * (t[vec][-1] // lanes) <= acc_wanted
        if few_rows:
            # A 7x7 or 14x14 conv's 1-2 output columns: more vectors instead, so the register
            # tile still holds enough independent accumulators to hide the FMA latency.
            more = max((d for d in _divisors(ext[vec]) if d % lanes == 0 and d // lanes <= MAX_VECTORS
                        and t[row][-1] * (d // lanes) <= acc_wanted), default=t[vec][-1])
            if more > t[vec][-1]:
                rem[vec] = rem[vec] * t[vec][-1] // more
                t[vec][-1] = more
    # A one-row register tile of a split panel, read without a stride: its kernel window goes
    # inside the inner reduction tile (FEW_ROWS_PANEL_L1).
    window_inside = bool(few_rows and FEW_ROWS_PANEL_L1 and not strided and row is not None
                         and t[row][-1] == 1 and not vec_looped)
    if (FILL_ACCUMULATORS and row is not None and vec is not None and not few_rows and not padded_row
            and not vec_looped and t[vec][-1] % lanes == 0):
        # A row axis with no divisor near the rows wanted (a 7x7 output's 7 columns: 1 row, so
        # 2 accumulators, a quarter of what hides the FMA latency): the rows and vectors that
        # hold the most accumulators up to the wanted count within the vector registers, fewest
        # loads a step next (7 rows x 1 vector on AVX2). Only from a 1-row tile: 14 columns'
        # 2 rows x 2 vectors made 2 x 4 ran 1.0-1.45x as long (ResNet-50's 14x14 1x1 convs).
        acc_wanted = base_rows * VECTORS
        regs = 32 if wide else 16
        r0, v0 = t[row][-1], t[vec][-1] // lanes
        if r0 == 1 < ext[row] and r0 * v0 < acc_wanted:
            fits = [(r * v, -(r + v), r, v) for r in _divisors(ext[row]) for v in range(1, MAX_VECTORS + 1)
                    if ext[vec] % (v * lanes) == 0 and r * v <= acc_wanted and r * v + v + 1 <= regs]
            _, _, r1, v1 = max(fits, default=(0, 0, r0, v0))
            if r1 * v1 > r0 * v0:
                t[row][-1], rem[row] = r1, ext[row] // r1
                t[vec][-1], rem[vec] = v1 * lanes, ext[vec] // (v1 * lanes)
    if (ROWS_FROM_TWO_AXES and row is not None and vec is not None and not weights_split and not weights_streamed
            and not padded_row and not vec_looped):
        # A row axis whose divisor stops short of the rows wanted (a 14x14 output's 14 columns:
        # 2 rows): the spatial axis before it gives the rest (2 x 2 output pixels), the same
        # vectors.
        others = [idx for idx in real if idx not in (vec, row)]
        if others and 1 < t[row][-1] < rows_wanted:
            f = _largest_divisor(ext[others[-1]], rows_wanted // t[row][-1])
            t[others[-1]][-1], rem[others[-1]] = f, ext[others[-1]] // f
    # Parallel items: outermost level, outer axes first; leave the vector axis unless needed.
    want = cores * PAR_PER_CORE
    have = 1
    order = [idx for idx, _ in g.spatial if idx != vec] + ([vec] if vec is not None else [])
    if padded_row and row is not None:  # parallel last: [3, None, 1, 8] by [2, 24, 2, 32] ran 2.2x slower
        order = [idx for idx in order if idx != row] + [row]
    if weights_split:
        order = [idx for idx in order if idx == vec] + [idx for idx in order if idx != vec]
    if weights_streamed:
        # A panel far beyond the caches (GPT-2's LM head: 768 x 50,304 floats, 154 MB): split
        # its columns between the cores and keep every row inside, so it is read once, not once
        # per parallel block of rows.
        order = [idx for idx in order if idx == vec] + [idx for idx in order if idx not in (vec, row)]
    for idx in order:
        if have >= want:
            break
        f = _largest_divisor(rem[idx], want / have)
        if have * f < cores and idx != vec and rem[idx] > f:
            f = _nearest_divisor(rem[idx], math.ceil(want / have))
        t[idx][0] = f
        rem[idx] //= f
        have *= f
    # Second-innermost level (inside the outer reduction tile): a few register tiles, so one
    # outer-reduction step reuses the panels it loaded.
    if n_s >= 3:
        if row is not None and weights_streamed:
            t[row][-2], rem[row] = rem[row], 1
        elif row is not None and few_rows:
            # Every output row of the core's block that fits inside one outer-reduction step (its
            # output tile within half of L1), so the step's slice of the split panel is reused
            # over all of them, not reloaded for each 1-2 row register tile.
            cap = caches.l1 // 2 // dtype_bytes // max(1, t[vec][-1] if vec is not None else 1)
            mids = [row] + [idx for idx, _ in reversed(g.spatial) if idx not in (vec, row)]
            got = math.prod(t[idx][-1] for idx in mids)
            for idx in mids:
                f = _largest_divisor(rem[idx], cap / got)
                t[idx][-2], rem[idx], got = f, rem[idx] // f, got * f
        elif row is not None and not padded_row and not vec_looped:  # a padded row axis: 2.2x slower with a middle tile
            t[row][-2] = _largest_divisor(rem[row], MID)
            rem[row] //= t[row][-2]
        if vec is not None and not vec_looped and not window_inside:
            t[vec][-2] = _largest_divisor(rem[vec], MID)
            rem[vec] //= t[vec][-2]
    # The rest in the second level (outside the reduction, not fused into the parallel loop).
    for idx, _ in g.spatial:
        lvl = 1 if n_s >= 3 else 0
        t[idx][lvl] *= rem[idx]
        out[idx] = t[idx]
    # Reduction: the last axis' inner tile sized so one step's panels fit half of L1.
    rows = math.prod(t[idx][-1] * (t[idx][-2] if n_s >= 3 and not weights_streamed else 1)
                     for idx, _ in g.spatial if idx != vec)
    cols = (t[vec][-1] * (t[vec][-2] if n_s >= 3 else 1)) if vec is not None else 1
    red = [idx for idx, e in g.reduction if e > 1]
    for idx, e in g.reduction:
        out[idx] = [e, 1]
    if red and window_inside:
        # A few-rows split panel (a 7x7 conv's weights): every pixel of the step reuses the
        # step's slice of weights, so the kernel window comes inside and the input channels
        # are sized so that the slice stays in L1 (see FEW_ROWS_PANEL_L1).
        # The input-channel axis is the longest (last in NHWC, first in NCHW); the others are
        # the window.
        extents = dict(g.reduction)
        chan = max(reversed(red), key=lambda idx: extents[idx])
        window = math.prod(extents[idx] for idx in red if idx != chan)
        for idx in red:
            out[idx] = [1, extents[idx]]
        fit = int(FEW_ROWS_PANEL_L1 * caches.l1) // dtype_bytes // max(1, window * cols)
        inner = _largest_divisor(extents[chan], max(1, fit))
        out[chan] = [extents[chan] // inner, inner]
    elif red:
        last = red[-1]
        e = dict(g.reduction)[last]
        # (a few-rows panel's output tile at the middle level is not counted in: it left inner
        # tiles of 4-8 channels, and the kernels it changes ran 1.16x slower in sum than with 32)
        budget = caches.l1 // 2 // dtype_bytes - (0 if few_rows else rows * cols)
        k = max(1, budget // max(1, rows + cols))
        inner = _largest_divisor(e, min(k, 64)) if not vec_looped else _largest_divisor(e, 2)
        out[last] = [e // inner, inner]
        # A last axis short enough to sit inside whole (a stem conv's 3 input channels): the
        # axes before it inside too, as far as the step's budget goes, so the register tile
        # accumulates more than 3 products between trips through memory.
        extents, got = dict(g.reduction), inner
        for idx in reversed(red[:-1]) if inner == e and not vec_looped and INNER_REDUCTION_ALL else ():
            if got >= min(k, 64):
                break
            f = _largest_divisor(extents[idx], min(k, 64) / got)
            out[idx] = [extents[idx] // f, f]
            got *= f
            if f < extents[idx]:
                break
    return out


def _analytic_decisions(skeleton: Any, target: Any, mod: Any = None) -> tuple[dict[int, Any], str]:
    """Decisions for every site of ``skeleton`` but compute locations (left open); ``mod`` (the
    task) gives the tiled blocks' reads (see :func:`_tile_group`)."""
    lanes, cores, caches = _lanes(target), _cores(target), cache_sizes()
    tiling = ""
    for inst in skeleton.insts:
        if inst[0] == "Annotate" and inst[2] == ["meta_schedule.tiling_structure"]:
            tiling = str(inst[1][1]).strip('"')
    n_s = tiling.count("S") or 4
    out: dict[int, Any] = {}
    for g in _tile_groups(skeleton.insts, skeleton.decisions, skeleton.sites):
        blk = _sblock(mod, g.block)
        out.update(_tile_group(g, n_s, lanes, cores, caches, reads=_site_reads(g, skeleton.insts, blk),
                               strided=blk is not None and _strided_reads(blk)))
    for idx, site in sorted(skeleton.sites.items()):
        if idx in out or site.kind == "compute_location":
            continue
        if site.kind == "tile":
            extent = math.prod(int(x) for x in skeleton.decisions.get(idx, [1]))
            inner = _largest_divisor(extent, min(lanes, max(1, site.max_innermost)))
            out[idx] = [1] * (site.n - 2) + [extent // inner, inner] if site.n >= 2 else [extent]
        elif site.kind == "categorical":
            choices = [int(c) for c in skeleton.insts[idx][2][0]]
            out[idx] = min(range(len(choices)), key=lambda c: (abs(choices[c] - UNROLL), c))
    tiles = [out[i] for i, s in sorted(skeleton.sites.items()) if s.kind == "tile" and i in out]
    return out, f"tiles {tiles} (SIMD {lanes}, {cores} cores, L1 {caches.l1 // 1024} KiB)"


# --------------------------------------------------------------------------------------------
# Ranking without measuring
# --------------------------------------------------------------------------------------------


def _passes(mod: Any) -> tuple[int, int]:
    """``(loop nests at the root, loops around the output's block)`` of a postprocessed program:
    each root nest is a pass over memory (a layout-rewrite preprocessing block is not counted:
    it runs once, on weights), and the output's depth says where an epilogue (or a cache
    write's copy) was fused; 0 where the tiled block writes the output itself (no epilogue: a
    cache write's extra copy measured 1.1-2x slower on a batch matmul and an NHWC conv)."""
    from tunecache.tvm_layer.features import _prim_func, _walk

    blocks, _, _ = _walk(_prim_func(mod))
    real = [b for b in blocks if len(b.realize.block.iter_vars) > 0
            and not b.realize.block.annotations.get("meta_schedule.layout_rewrite_preproc")]
    if not real:
        return 0, 0
    last = real[-1]
    tiled_last = "meta_schedule.tiling_structure" in last.realize.block.annotations
    return len({id(b.loops[0]) if b.loops else id(b) for b in real}), 0 if tiled_last else len(last.loops)


def _static_score(cand: Any, lanes: int, cores: int, caches: CacheSizes, n_sites: int,
                  at_root: float = 0.0, tiled: bool = False) -> tuple[float, ...]:
    """Lower is better: missing parallelism first, then producers left at the root (a pass
    over memory each), for a tiled block the loop nests at the root (an epilogue not fused is
    one more pass), missing vector width, caches, for a tiled block the depth at which its
    epilogue was fused (outer first: its loops are long enough to vectorize), then the simpler
    sketch (fewer sampled decisions).

    The nests and the depth were set on MobileNetV2's NCHW convolutions (AVX-512 Xeon, 2 cores):
    the sketch with the epilogue at the root, the one chosen before, was 1.3-5x slower than
    one with it fused, and fusing it at the outer tile beat the inner tile on 4 of 5 tasks.
    """
    f = cand.features
    if f is None:
        return (9.0, 9.0, 9.0, 9.0, 9.0, 9.0, float(n_sites))
    par = 0.0 if f.parallel_extent >= cores else 1.0 - f.parallel_extent / cores
    vec = 0.0 if f.vector_lanes >= lanes else 1.0 - f.vector_lanes / lanes
    l1 = max(0.0, math.log2(max(1, f.inner_footprint_bytes) / caches.l1))
    l2 = max(0.0, math.log2(max(1, f.item_footprint_bytes) / caches.l2))
    nests, depth = _passes(cand.sch.mod) if tiled else (0, 0)
    return (round(par, 3), round(at_root, 3), float(nests), round(vec, 3), round(l1 + l2, 3), float(depth),
            float(n_sites))


def _middle_location(mat: Any, skeleton: Any, applied: dict[int, Any], idx: int, limit: int = 24) -> int:
    """The middle of the loop locations TVM accepts at open site ``idx`` (the root if none).

    Like :func:`~tunecache.search.narrow.align.open_locations`, but stops probing once TVM
    clamps an index to the last loop (it replays an index past the last loop as that loop):
    a softmax's nine sketches took 4 s with every index probed.
    """
    loops: list[int] = []
    for value in range(0, limit):
        got = mat.replay(skeleton, {**applied, idx: value}, probe=True)
        loc = None if got is None else got[1].get(idx)
        if loc is not None and int(loc) >= 0 and int(loc) not in loops:
            loops.append(int(loc))
        if loc is not None and int(loc) < value:
            break
    loops.sort()
    return loops[len(loops) // 2] if loops else -1


def _imperfect_splits(sk: Any, chosen: dict[int, Any]) -> tuple[list[Any], dict[int, Any]]:
    """The skeleton's instructions with a literal ``Split`` for every tile whose factors cover
    more than its loop (a padded row axis, :data:`PAD_WASTE`), and the decisions to replay.

    ``SamplePerfectTile`` cannot cover 197 rows with 8-row tiles. Such a site keeps its sampled
    decision (now unused) and the ``Split`` it fed gets the factors as constants, the second
    level ``None``, so TVM computes it as a ceiling and predicates the last tile (a 197x768x3072
    dense ran at 143 GFLOP/s with [None, 25, 1, 8] against 20 GFLOP/s with 1-row tiles, 2
    threads, same load). Searches that start from such a program mutate the other sites.
    """
    insts = list(sk.insts)
    decisions = dict(chosen)
    for idx, tiles in chosen.items():
        site = sk.sites.get(idx)
        if site is None or site.kind != "tile" or idx not in sk.decisions:
            continue
        extent = math.prod(int(x) for x in sk.decisions[idx])
        if math.prod(int(x) for x in tiles) == extent or len(tiles) < 2:
            continue
        outs = [str(o) for o in insts[idx][3]]
        at = next((j for j, inst in enumerate(insts)
                   if inst[0] == "Split" and [str(x) for x in inst[1][1:]] == outs), None)
        if at is None:  # not a plain split of this sample: keep the sampled tiles
            decisions[idx] = sk.decisions[idx]
            continue
        kind, inputs, attrs, outputs = insts[at]
        factors: list[Any] = [int(x) for x in tiles]
        factors[1] = None
        insts[at] = [kind, [inputs[0], *factors], attrs, outputs]
        decisions[idx] = sk.decisions[idx]
    return insts, decisions


def _design_space_skeletons(mod: Any, target: Any) -> list[Any]:
    from tunecache.search.narrow.align import Skeleton
    from tunecache.tvm_layer.sketch import design_space_json

    return [Skeleton(i, decode_trace(t)) for i, t in enumerate(design_space_json(mod, target))]


def predict_program(mod: Any, target: Any, *, seed: int = 0) -> Prediction | str:
    """Choose a program for a TIR task without measuring anything.

    Parameters
    ----------
    mod
        The task: a TIR ``IRModule`` (or ``PrimFunc``).
    target
        A ``tvm.target.Target`` (or a target dict). CPU (``llvm``) targets get the analytic
        decisions; others get them too, but are not what the rules were written for.
    seed
        Seeds the replay schedule (decisions do not depend on it).

    Returns
    -------
    Prediction or str
        The chosen postprocessed schedule with a one-line ``how``, or a one-line reason there
        is none (the caller falls back to TVM's default schedule).
    """
    from tunecache.search.narrow.align import Materializer, Skeleton, open_picks
    from tunecache.search.narrow.replay import as_ir_module
    from tunecache.tvm_layer.sketch import as_target

    try:
        target = as_target(target)
        mod = as_ir_module(mod)
        skeletons = _design_space_skeletons(mod, target)
    except Exception as err:  # noqa: BLE001 - a task MetaSchedule cannot describe is a reason
        return f"no design space: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    if not skeletons:
        return "the design space is empty"
    lanes, cores, caches = _lanes(target), _cores(target), cache_sizes()
    mat = Materializer(mod, target, seed, sketches=[list(sk.insts) for sk in skeletons])
    every = mat.postprocs
    # Candidates are ranked without the postprocessors that leave the score as it is, and only
    # the chosen one gets them: RewriteLayout (weight prepacking) was 0.43 of ResNet-18's 0.55 s
    # of postprocessing, and it changes no loop the score reads (checked: the same program on
    # every task of the ten bench_never models, docs/NOTES.md session 12).
    mat.postprocs = [p for p in every if type(p).__name__ not in SCORED_WITHOUT]
    best: tuple[tuple[float, ...], int, Any, str] | None = None
    for sk in skeletons:
        chosen, how = _analytic_decisions(sk, target, mod)
        insts, chosen = _imperfect_splits(sk, chosen)
        open_sk = Skeleton(sk.source, [insts, [[i, chosen[i]] for i in sorted(chosen)]])  # locations open
        tiled = bool(_tile_groups(sk.insts, sk.decisions, sk.sites))
        try:
            # Tiled (a conv's pad_temp): the block's root. Untiled chains (softmax, norms): the
            # middle accepted loop, which keeps a row's stages together (root 1.4-1.7x slower,
            # the deepest loop 10x on a 12x128x128 softmax). A depthwise conv's padding per
            # innermost tile instead of at the root: 0.64-0.86x on stride-2 depthwise convs,
            # 4-12x slower on 7x7 and 14x14 ones (MobileNetV2, interleaved, load 6): root kept;
            # inlined, 0.55-0.84x the root's time on all seven (session 26): open_picks inlines it.
            if tiled:
                pick = open_picks(mat, open_sk, dict(chosen), 1)[0]
            else:
                pick = {**chosen, **{i: _middle_location(mat, open_sk, chosen, i) for i in open_sk.open_sites}}
            cand = mat.materialize(open_sk, pick)
        except Exception:  # noqa: BLE001 - one sketch failing is not the task failing
            cand = None
        if cand is None:
            continue
        locs = [cand.decisions.get(i) for i in open_sk.open_sites]
        at_root = 0.0 if tiled or not locs else sum(v == -1 for v in locs) / len(locs)
        score = _static_score(cand, lanes, cores, caches, len(sk.sites), at_root, tiled)
        if best is None or score < best[0]:
            best = (score, sk.source, cand, how)
    if best is None:
        return (f"no sketch of {len(skeletons)} gave a valid program with analytic decisions "
                f"({mat.failed_replay} failed to replay, {mat.failed_postproc} rejected by a postprocessor)")
    score, index, cand, how = best
    if len(mat.postprocs) != len(every):
        mat.postprocs = every
        cand = mat.materialize(cand.skeleton, cand.decisions)
        if cand is None:
            return (f"sketch {index + 1} of {len(skeletons)}, chosen with analytic decisions, is rejected by "
                    "a postprocessor it was ranked without")
    return Prediction(cand.sch, f"analytic, sketch {index + 1} of {len(skeletons)}: {how}; "
                      f"unroll {UNROLL}; static score {list(score)}; 0 measurements", index, cand.decisions)


def predicted_trace(mod: Any, target: Any) -> list[Any] | None:
    """:func:`predict_program`'s program as plain trace JSON (``[instructions, decisions]``), or
    ``None`` when there is none (a narrowed search takes it as one more source)."""
    try:
        got = predict_program(mod, target)
        return None if isinstance(got, str) else decode_trace(got.sch.trace.as_json())
    except Exception:  # noqa: BLE001 - no prediction: the caller goes on without one
        return None


def predicted_record(mod: Any, key: WorkloadKey, hardware: HardwareKey, target: Any, *,
                     seed: int = 0) -> Record | str:
    """Return :func:`predict_program`'s program as the task's record, or why there is none.

    The record has no run times (nothing was measured: ``latency_s`` is ``None``), provenance
    :data:`PROVENANCE_KIND`, and a uid
    derived from the task, the hardware and the trace, so the same prediction is the same record
    (a library cached from it is found again). It is meant to be served, never stored as a
    measurement. :func:`predict_task` also returns how the program was chosen.
    """
    got = predict_task(mod, key, hardware, target, seed=seed)
    return got if isinstance(got, str) else got[0]


def predict_task(mod: Any, key: WorkloadKey, hardware: HardwareKey, target: Any, *,
                 seed: int = 0) -> tuple[Record, str] | str:
    """:func:`predicted_record` with :attr:`Prediction.how` (for the report's note)."""
    import json

    from tunecache.errors import InvalidRecordError
    from tunecache.search.narrow.replay import as_ir_module
    from tunecache.tvm_layer import load_tvm, scheduled
    from tunecache.tvm_layer.convert import record_from_tvm
    from tunecache.tvm_layer.sketch import as_target

    target = as_target(target)
    got = predict_program(mod, target, seed=seed)
    if isinstance(got, str):
        return got
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    try:
        tr = ms.database.TuningRecord(
            got.sch.trace, ms.database.Workload(as_ir_module(mod)), None, target,
            ms.arg_info.ArgInfo.from_entry_func(got.sch.mod, remove_preproc=True))
        prov = Provenance(kind=PROVENANCE_KIND, tvm_version=hardware.tvm_version)
        rec = record_from_tvm(tr, key, hardware, prov)
    except (InvalidRecordError, TypeError, ValueError) as err:
        return f"the predicted program cannot be recorded: {err}"
    scheduled.remember(key.shash, rec.trace, target, got.sch.mod)  # the build takes it as it is
    digest = hashlib.sha256(json.dumps(rec.trace, sort_keys=True).encode()).hexdigest()[:16]
    uid = hashlib.sha256(f"predict/1|{key}|{hardware.id}|{digest}".encode()).hexdigest()[:32]
    return replace(rec, uid=uid), got.how
