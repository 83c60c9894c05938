"""Keys of the store: what identifies a workload and the hardware a record was measured on.

These are plain frozen values with no TVM objects inside, so the store and the planner can be
tested without TVM. ``tunecache.tvm_layer`` builds them from TVM objects.

A key says everything that can invalidate a result (see STYLE.md): a record is served as an
exact hit only when the workload hash, the canonical target, the host fingerprint and the TVM
version all match.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "WorkloadKey",
    "WorkloadDesc",
    "HostFingerprint",
    "HardwareKey",
    "MissExplanation",
    "canonical_json",
    "explain_miss",
]

#: The only equality mode tunecache uses to compare workloads (MetaSchedule's default).
DEFAULT_MOD_EQ = "structural"


def canonical_json(value: Any) -> str:
    """Return a canonical JSON text: sorted keys, no whitespace, tuples as lists."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


@dataclass(frozen=True)
class WorkloadKey:
    """Identity of a tuning workload: MetaSchedule's structural hash and its equality mode.

    Parameters
    ----------
    shash
        ``str(tvm_ffi.structural_hash(mod))``, as MetaSchedule's ``Workload.as_json()[0]``.
    mod_eq
        The module equality mode the hash was computed under.
    """

    shash: str
    mod_eq: str = DEFAULT_MOD_EQ

    def __post_init__(self) -> None:
        if not isinstance(self.shash, str) or not self.shash:
            raise ValueError(f"WorkloadKey.shash must be a non-empty string, got {self.shash!r}")

    def __str__(self) -> str:
        return f"{self.mod_eq}:{self.shash}"


@dataclass(frozen=True)
class WorkloadDesc:
    """A description of a workload that survives TVM upgrades (the hash does not).

    Attributes
    ----------
    name
        Task or PrimFunc name (e.g. ``fused_conv2d_add_relu``).
    family
        Operator family (``conv2d``, ``matmul``, ``batch_matmul``, ... or ``other``).
    shapes
        Shapes of the PrimFunc's buffer parameters, in parameter order.
    dtypes
        Dtypes of the same parameters.
    extents
        Loop extents of the major loop nest, when known (space loops then reduction loops).
    """

    name: str = ""
    family: str = "other"
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    extents: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        d = asdict(self)
        d["shapes"] = [list(s) for s in self.shapes]
        d["dtypes"] = list(self.dtypes)
        d["extents"] = list(self.extents)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkloadDesc:
        """Build from :meth:`to_dict` output (unknown keys are ignored)."""
        return cls(
            name=str(d.get("name", "")),
            family=str(d.get("family", "other")),
            shapes=tuple(tuple(int(x) for x in s) for s in d.get("shapes", ())),
            dtypes=tuple(str(x) for x in d.get("dtypes", ())),
            extents=tuple(int(x) for x in d.get("extents", ())),
        )


@dataclass(frozen=True)
class HostFingerprint:
    """What about the measuring machine changes which program is fastest.

    The host name is deliberately *not* part of it: two machines with the same CPU model and
    target share records.
    """

    cpu_model: str = ""
    isa: tuple[str, ...] = ()
    cores: int = 0
    gpu_name: str = ""
    gpu_compute: str = ""

    def __post_init__(self) -> None:
        # ISA flags are a set: order must not change equality or the key's id.
        object.__setattr__(self, "isa", tuple(sorted(set(self.isa))))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        d = asdict(self)
        d["isa"] = sorted(self.isa)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostFingerprint:
        """Build from :meth:`to_dict` output."""
        return cls(
            cpu_model=str(d.get("cpu_model", "")),
            isa=tuple(sorted(str(x) for x in d.get("isa", ()))),
            cores=int(d.get("cores", 0)),
            gpu_name=str(d.get("gpu_name", "")),
            gpu_compute=str(d.get("gpu_compute", "")),
        )


@dataclass(frozen=True)
class HardwareKey:
    """Identity of the hardware and compiler a record was measured with.

    Attributes
    ----------
    target
        Canonical target: sorted JSON of the TVM target's exported dict.
    fingerprint
        The host fingerprint.
    tvm_version
        ``tvm.__version__`` of the measuring process.
    """

    target: str
    fingerprint: HostFingerprint = field(default_factory=HostFingerprint)
    tvm_version: str = ""

    @property
    def target_kind(self) -> str:
        """Return the target kind (``llvm``, ``cuda``, ...)."""
        try:
            return str(json.loads(self.target).get("kind", ""))
        except (ValueError, AttributeError):
            return ""

    @property
    def id(self) -> str:
        """Return a short stable digest of every component (the store's lookup column)."""
        return _digest(canonical_json(self.to_dict()))

    @property
    def target_id(self) -> str:
        """Return a short digest of the canonical target alone.

        What depends on the target but not on the host or the TVM build (a workload's sketch
        set, hence its reuse-index entry) is stored under this id.
        """
        return _digest(self.target)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "target": self.target,
            "fingerprint": self.fingerprint.to_dict(),
            "tvm_version": self.tvm_version,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareKey:
        """Build from :meth:`to_dict` output."""
        return cls(
            target=str(d["target"]),
            fingerprint=HostFingerprint.from_dict(d.get("fingerprint", {})),
            tvm_version=str(d.get("tvm_version", "")),
        )

    def describe(self) -> str:
        """Return a one-line human description."""
        fp = self.fingerprint
        dev = fp.gpu_name or fp.cpu_model or "unknown device"
        return f"{self.target_kind} on {dev} ({fp.cores} cores), TVM {self.tvm_version} [{self.id}]"


@dataclass(frozen=True)
class MissExplanation:
    """Why a lookup missed: which component of the closest stored key differed."""

    differences: tuple[str, ...]
    closest: HardwareKey | None

    @property
    def reason(self) -> str:
        """Return a one-line explanation."""
        if self.closest is None:
            return "the store has no records for this workload on any hardware"
        if not self.differences:
            return "an identical hardware key exists (no difference found)"
        return "closest stored hardware differs in: " + "; ".join(self.differences)


def _target_diff(a: str, b: str) -> list[str]:
    try:
        da, db = json.loads(a), json.loads(b)
    except ValueError:
        return ["target"] if a != b else []
    out = []
    for k in sorted(set(da) | set(db)):
        if da.get(k) != db.get(k):
            out.append(f"target.{k} ({db.get(k)!r} stored vs {da.get(k)!r} queried)")
    return out


def _differences(query: HardwareKey, stored: HardwareKey) -> list[str]:
    diffs = _target_diff(query.target, stored.target)
    qf, sf = query.fingerprint, stored.fingerprint
    for name in ("cpu_model", "cores", "gpu_name", "gpu_compute"):
        qv, sv = getattr(qf, name), getattr(sf, name)
        if qv != sv:
            diffs.append(f"host.{name} ({sv!r} stored vs {qv!r} queried)")
    if set(qf.isa) != set(sf.isa):
        only_q = sorted(set(qf.isa) - set(sf.isa))
        only_s = sorted(set(sf.isa) - set(qf.isa))
        diffs.append(f"host.isa (only stored: {only_s}, only queried: {only_q})")
    if query.tvm_version != stored.tvm_version:
        diffs.append(f"tvm_version ({stored.tvm_version!r} stored vs {query.tvm_version!r} queried)")
    return diffs


def explain_miss(query: HardwareKey, stored: Iterable[HardwareKey]) -> MissExplanation:
    """Explain why ``query`` found no record, given the hardware keys that do have one.

    Parameters
    ----------
    query
        The hardware key of the lookup that missed.
    stored
        Hardware keys under which the store holds records for the same workload.

    Returns
    -------
    MissExplanation
        The differing components of the closest stored key (fewest differences).

    Examples
    --------
    >>> a = HardwareKey('{"kind":"llvm","mcpu":"znver3"}', tvm_version="0.27")
    >>> b = HardwareKey('{"kind":"llvm","mcpu":"skylake"}', tvm_version="0.27")
    >>> explain_miss(a, [b]).differences
    ("target.mcpu ('skylake' stored vs 'znver3' queried)",)
    """
    best: tuple[int, HardwareKey, Sequence[str]] | None = None
    for key in stored:
        diffs = _differences(query, key)
        if best is None or len(diffs) < best[0]:
            best = (len(diffs), key, diffs)
    if best is None:
        return MissExplanation((), None)
    return MissExplanation(tuple(best[2]), best[1])
