"""Tuning records as frozen values, and the validating decoder for record JSON.

A record is what the store keeps for one measured program: the MetaSchedule trace (as JSON,
decisions included), its measured run times, and where it came from. Records are JSON, never
pickles: a store is shared with other people, and nothing read from it is trusted until it has
passed :func:`decode_trace` and friends.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tunecache.errors import InvalidRecordError
from tunecache.store.keys import HardwareKey, WorkloadKey

__all__ = [
    "INVALID_RUN_SECS",
    "PROVENANCE_KINDS",
    "Provenance",
    "Record",
    "decode_json_text",
    "decode_trace",
    "decode_trace_text",
    "decode_run_secs",
    "decode_args_info",
    "mean_latency",
]

#: MetaSchedule marks a failed build or run with this run time (1e10 s); anything at or above
#: it is "not a valid measurement".
INVALID_RUN_SECS = 1e9
#: How a record was obtained.
PROVENANCE_KINDS = frozenset({"tuned", "reused", "imported", "remeasured", "verified", "replayed", "predicted"})

# Limits for data read from files or other people's stores.
MAX_JSON_CHARS = 4_000_000
MAX_DEPTH = 24
MAX_INSTRUCTIONS = 10_000
MAX_INT = 2**62


@dataclass(frozen=True)
class Provenance:
    """Where a record came from.

    Attributes
    ----------
    kind
        ``tuned`` (full search), ``reused`` (narrowed search from another workload's program),
        ``imported`` (from a JSONDatabase or an export), ``remeasured``, or ``verified`` (a
        record of another TVM version whose trace still replays, re-admitted by
        ``tunecache db verify``).
    source_workload
        For ``reused``: the workload key (``str(WorkloadKey)``) whose program was reused.
    source_record
        For ``reused``: the uid of the source record, when known.
    trials
        Measurements the search spent on the task when this record was found.
    seconds
        Wall-clock seconds that search took.
    host, user
        Who measured it.
    tunecache_version, tvm_version
        Software versions of the measuring process.
    created_at
        Unix time of the measurement.
    """

    kind: str = "tuned"
    source_workload: str | None = None
    source_record: str | None = None
    trials: int = 0
    seconds: float = 0.0
    host: str = ""
    user: str = ""
    tunecache_version: str = ""
    tvm_version: str = ""
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.kind not in PROVENANCE_KINDS:
            raise InvalidRecordError(
                f"provenance kind {self.kind!r} is not one of {sorted(PROVENANCE_KINDS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "kind": self.kind,
            "source_workload": self.source_workload,
            "source_record": self.source_record,
            "trials": self.trials,
            "seconds": self.seconds,
            "host": self.host,
            "user": self.user,
            "tunecache_version": self.tunecache_version,
            "tvm_version": self.tvm_version,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Provenance:
        """Decode a provenance dict (validating types)."""
        if not isinstance(d, dict):
            raise InvalidRecordError(f"provenance must be an object, got {type(d).__name__}")
        try:
            return cls(
                kind=_str(d.get("kind", "imported"), "provenance.kind"),
                source_workload=_opt_str(d.get("source_workload"), "provenance.source_workload"),
                source_record=_opt_str(d.get("source_record"), "provenance.source_record"),
                trials=_int(d.get("trials", 0), "provenance.trials", lo=0),
                seconds=_float(d.get("seconds", 0.0), "provenance.seconds", lo=0.0),
                host=_str(d.get("host", ""), "provenance.host"),
                user=_str(d.get("user", ""), "provenance.user"),
                tunecache_version=_str(d.get("tunecache_version", ""), "provenance.tunecache_version"),
                tvm_version=_str(d.get("tvm_version", ""), "provenance.tvm_version"),
                created_at=_float(d.get("created_at", time.time()), "provenance.created_at", lo=0.0),
            )
        except InvalidRecordError:
            raise


@dataclass(frozen=True)
class Record:
    """One measured program of one workload on one hardware key.

    Attributes
    ----------
    workload, hardware
        The keys the record belongs to.
    trace
        The MetaSchedule trace as JSON (``[instructions, decisions]``).
    run_secs
        Raw run times measured during tuning (empty if the candidate failed).
    latency_s
        The latency the store ranks by: the re-measured latency when there is one, else the
        mean of ``run_secs``; ``None`` for a failed candidate.
    args_info
        MetaSchedule's argument info JSON (tensor dtypes and shapes).
    provenance
        How the record was obtained.
    uid
        A unique id made when the record is created; committing the same uid twice is a no-op,
        so retries and pushes between stores never duplicate a record.
    stale
        ``True`` once ``tunecache db verify`` found the trace no longer holds on this TVM.
    cv
        Coefficient of variation of the re-measurement, when re-measured.
    """

    workload: WorkloadKey
    hardware: HardwareKey
    trace: Any
    run_secs: tuple[float, ...] = ()
    latency_s: float | None = None
    args_info: Any = None
    provenance: Provenance = field(default_factory=Provenance)
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    stale: bool = False
    cv: float | None = None

    @property
    def is_valid(self) -> bool:
        """Return whether the record holds a successful measurement."""
        return self.latency_s is not None

    def with_latency(self, latency_s: float, cv: float | None = None) -> Record:
        """Return a copy whose ranking latency is ``latency_s`` (e.g. after re-measurement)."""
        return replace(self, latency_s=latency_s, cv=cv)

    @classmethod
    def from_measurement(
        cls,
        workload: WorkloadKey,
        hardware: HardwareKey,
        trace: Any,
        run_secs: Sequence[float] | None,
        args_info: Any,
        provenance: Provenance,
    ) -> Record:
        """Build a record from a raw measurement, validating the trace and run times."""
        secs = decode_run_secs(run_secs)
        return cls(
            workload=workload,
            hardware=hardware,
            trace=decode_trace(trace),
            run_secs=secs,
            latency_s=mean_latency(secs),
            args_info=decode_args_info(args_info),
            provenance=provenance,
        )


def mean_latency(run_secs: Sequence[float]) -> float | None:
    """Return the mean of valid run times, or ``None`` if the measurement failed."""
    if not run_secs or any(s >= INVALID_RUN_SECS for s in run_secs):
        return None
    return float(sum(run_secs) / len(run_secs))


# ---------------------------------------------------------------------------------------------
# Validating decoders. Each raises InvalidRecordError (never anything else) on bad input.


def decode_json_text(text: Any, what: str = "record") -> Any:
    """Parse JSON text from an untrusted source with size, nesting and number limits.

    The value comes back as plain JSON types (lists, dicts with string keys, strings, finite
    floats, integers within ``MAX_INT``, booleans, ``None``; lists and dicts nested at most
    ``MAX_DEPTH`` deep), so a decoder given it need not walk it again (:func:`decode_trace_text`).
    Numbers are checked as they are parsed and only containers are walked for the nesting: two
    walks over every value (nesting, then plain types) took 0.27 of 0.29 ms a BERT trace (AMD Zen 4).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InvalidRecordError(f"{what}: not UTF-8 text ({err})") from err
    if not isinstance(text, str):
        raise InvalidRecordError(f"{what}: expected JSON text, got {type(text).__name__}")
    if len(text) > MAX_JSON_CHARS:
        raise InvalidRecordError(f"{what}: {len(text)} characters exceeds the {MAX_JSON_CHARS} limit")
    try:
        value = _DECODER.decode(text)
    except RecursionError as err:
        raise InvalidRecordError(f"{what}: JSON nested too deeply") from err
    except ValueError as err:  # JSONDecodeError, and the hooks' rejections
        raise InvalidRecordError(f"{what}: not valid JSON ({err})") from err
    _check_nesting(value, what)
    return value


def _check_nesting(value: Any, what: str) -> None:
    """Raise unless ``value``'s lists and dicts nest at most :data:`MAX_DEPTH` deep.

    Walks a level at a time, looking at containers only (4x faster than a walk over every value,
    which a record read paid once per trace).

    >>> _check_nesting([1, {"a": [2]}], "x")
    >>> _check_nesting([[[0]]] * 2, "x") is None
    True
    """
    level = [value] if type(value) is list or type(value) is dict else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise InvalidRecordError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
        level = [x for c in level for x in (c.values() if type(c) is dict else c)
                 if type(x) is list or type(x) is dict]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _bounded_int(digits: str) -> int:
    value = int(digits)
    if abs(value) > MAX_INT:
        raise ValueError(f"integer {digits} is out of range")
    return value


def _finite_float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {digits}")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_bounded_int, parse_float=_finite_float)


def _plain(value: Any, what: str, depth: int = 0) -> Any:
    """Return ``value`` as plain JSON types, rejecting anything else (and TVM IntImm-likes)."""
    if depth > MAX_DEPTH:
        raise InvalidRecordError(f"{what}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise InvalidRecordError(f"{what}: integer {value} is out of range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRecordError(f"{what}: non-finite number {value}")
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, what, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, what, depth + 1) for k, v in value.items()}
    if hasattr(value, "value") and isinstance(value.value, (int, float)):
        return _plain(value.value, what, depth + 1)  # tvm IntImm / FloatImm
    raise InvalidRecordError(f"{what}: unexpected value of type {type(value).__name__}")


def decode_trace(trace: Any) -> list[Any]:
    """Validate a MetaSchedule trace JSON (``[instructions, decisions]``).

    Checks the shape only (every instruction is ``[kind, inputs, attrs, outputs]`` with a
    string kind, every decision is ``[index, value]`` pointing at an instruction); whether the
    instruction kinds exist and the trace replays is checked by the TVM layer. ``trace`` may
    hold TVM values (``IntImm``); they come back as plain JSON types.

    Raises
    ------
    InvalidRecordError
        With a message naming what is wrong.
    """
    return _check_trace(_plain(trace, "trace"))


def decode_trace_text(text: Any) -> list[Any]:
    """:func:`decode_trace` of stored JSON text (:func:`decode_json_text`'s value is plain
    already: not walked again).

    Raises
    ------
    InvalidRecordError
        With a message naming what is wrong.
    """
    return _check_trace(decode_json_text(text, "trace"))


def _check_trace(trace: Any) -> list[Any]:
    if not isinstance(trace, list) or len(trace) != 2:
        raise InvalidRecordError("trace: expected [instructions, decisions]")
    insts, decisions = trace
    if not isinstance(insts, list) or not isinstance(decisions, list):
        raise InvalidRecordError("trace: instructions and decisions must be lists")
    if len(insts) > MAX_INSTRUCTIONS:
        raise InvalidRecordError(f"trace: {len(insts)} instructions exceeds {MAX_INSTRUCTIONS}")
    for i, inst in enumerate(insts):
        if not (isinstance(inst, list) and len(inst) == 4):
            raise InvalidRecordError(f"trace: instruction {i} is not [kind, inputs, attrs, outputs]")
        kind, inputs, attrs, outputs = inst
        if not isinstance(kind, str) or not kind or not kind.isidentifier():
            raise InvalidRecordError(f"trace: instruction {i} has an invalid kind {kind!r}")
        if not (isinstance(inputs, list) and isinstance(attrs, list) and isinstance(outputs, list)):
            raise InvalidRecordError(f"trace: instruction {i} ({kind}) has non-list fields")
    for d in decisions:
        if not (isinstance(d, list) and len(d) == 2 and isinstance(d[0], int)):
            raise InvalidRecordError(f"trace: decision {d!r} is not [instruction_index, value]")
        if not 0 <= d[0] < len(insts):
            raise InvalidRecordError(f"trace: decision points at instruction {d[0]}, which does not exist")
    return trace


def decode_run_secs(run_secs: Any) -> tuple[float, ...]:
    """Validate measured run times: a list of finite, non-negative numbers."""
    if run_secs is None:
        return ()
    if not isinstance(run_secs, (list, tuple)):
        raise InvalidRecordError(f"run_secs: expected a list of numbers, got {type(run_secs).__name__}")
    out = []
    for s in run_secs:
        s = _plain(s, "run_secs")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
            raise InvalidRecordError(f"run_secs: {s!r} is not a finite non-negative number")
        if s > 1e11:
            raise InvalidRecordError(f"run_secs: {s!r} is absurdly large")
        out.append(float(s))
    if len(out) > 10_000:
        raise InvalidRecordError("run_secs: too many measurements")
    return tuple(out)


def decode_args_info(args_info: Any) -> Any:
    """Validate MetaSchedule args info: a list of ``["TENSOR", dtype, shape]`` entries."""
    if args_info is None:
        return None
    args_info = _plain(args_info, "args_info")
    if not isinstance(args_info, list):
        raise InvalidRecordError("args_info: expected a list")
    for a in args_info:
        if not (isinstance(a, list) and len(a) == 3 and a[0] == "TENSOR"):
            raise InvalidRecordError(f"args_info: entry {a!r} is not ['TENSOR', dtype, shape]")
        if not isinstance(a[1], str) or not isinstance(a[2], list):
            raise InvalidRecordError(f"args_info: entry {a!r} has a bad dtype or shape")
        for x in a[2]:
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise InvalidRecordError(f"args_info: shape {a[2]!r} is not a list of sizes")
    return args_info


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise InvalidRecordError(f"{what}: expected a string, got {type(v).__name__}")
    if len(v) > 10_000:
        raise InvalidRecordError(f"{what}: string too long")
    return v


def _opt_str(v: Any, what: str) -> str | None:
    return None if v is None else _str(v, what)


def _int(v: Any, what: str, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or abs(v) > MAX_INT:
        raise InvalidRecordError(f"{what}: expected an integer in range, got {v!r}")
    if lo is not None and v < lo:
        raise InvalidRecordError(f"{what}: {v} is below {lo}")
    return v


def _float(v: Any, what: str, lo: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 1e15:
        raise InvalidRecordError(f"{what}: expected a finite number, got {v!r}")
    if lo is not None and v < lo:
        raise InvalidRecordError(f"{what}: {v} is below {lo}")
    return float(v)
