"""Compilation targets: turn what a user writes into a TVM target, and a target into a key.

Accepted target forms (:func:`resolve_target`)
------------------------------------------------
``None``, ``"llvm"``, ``"cpu"``, ``"host"``
    This host's CPU: ``{"kind": "llvm", "num-cores": <physical cores>, "mcpu": <host CPU>}``.
    ``mcpu`` comes from ``tvm.target.codegen.llvm_get_system_cpu()`` (e.g. ``"znver3"``); it is
    never ``"native"``, which TVM silently turns into a generic SSE2-only CPU.
``"cuda"``, ``"gpu"``
    The first NVIDIA GPU that ``nvidia-smi`` reports: its TVM tag when one matches the name
    and compute capability (``"nvidia/nvidia-a100"``), else an explicit CUDA target with that
    ``sm_XY`` arch and the usual per-block limits. Without a visible GPU this is a
    :class:`~tunecache.errors.TargetError` (name the GPU with a tag instead).
A TVM tag
    ``"nvidia/nvidia-h100"``, ``"aws/cpu/c5.4xlarge"``, ... (``tvm.target.list_tags()``).
A JSON object or a dict
    ``'{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 8}'``; ``"mcpu": "native"`` is
    replaced by the host CPU name. An ``mcpu`` LLVM does not know for the target's triple is a
    :class:`~tunecache.errors.TargetError` (LLVM itself would silently compile for a generic
    CPU). An LLVM target for this host's architecture (no ``mtriple``, or this host's) that
    does not say ``num-cores`` gets this host's physical core count, as the default target does:
    ``"llvm -mcpu=<host cpu>"`` is the default target, with the same hardware key. A CUDA dict
    gets the per-block limits MetaSchedule reads (``max_threads_per_block``,
    ``max_shared_memory_per_block``, ...) where it does not set them.
A legacy command line
    ``"llvm -mcpu=znver3 -num-cores=4"`` (TVM 0.27 itself rejects this form).
A bare target kind
    ``"rocm"``, ``"metal"``, ``"vulkan"``, ... passed to TVM as ``{"kind": ...}``.
A ``tvm.target.Target``
    Returned unchanged.

Hardware keys (:func:`hardware_key`)
------------------------------------
The canonical target is the sorted JSON of ``target.export()`` with TVM containers turned into
plain lists and dicts. The ``"tag"`` entry is dropped: TVM 0.27 exports it empty even for a
target made from a tag, and the attributes a tag expands to are in the key anyway.

The host fingerprint says what the target does not: for CPU targets the CPU model (with
family/model numbers when the model name is generic, as ``"AMD EPYC"`` in some VMs), the ISA
extensions that change which program is fastest, and the physical core count. For GPU targets it
holds the GPU name and compute capability instead, and leaves the CPU fields empty: the host CPU
does not change how fast a kernel runs, so GPU records are shared across host CPUs.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from tunecache.errors import TargetError, did_you_mean
from tunecache.store.keys import HardwareKey, HostFingerprint, canonical_json
from tunecache.tvm_layer import load_tvm

if TYPE_CHECKING:  # pragma: no cover
    import tvm

__all__ = [
    "TargetLike",
    "GpuInfo",
    "resolve_target",
    "host_cpu_target",
    "host_triple",
    "canonical_target",
    "target_dict",
    "target_kind",
    "host_fingerprint",
    "hardware_key",
    "physical_cores",
    "cache_bytes",
    "detect_gpus",
]

#: What :func:`resolve_target` accepts.
TargetLike = Union[None, str, Mapping[str, Any], "tvm.target.Target"]

_HOST_ALIASES = frozenset({"llvm", "cpu", "host"})
_CUDA_ALIASES = frozenset({"cuda", "gpu", "nvidia"})
_GPU_KINDS = frozenset({"cuda", "rocm", "metal", "vulkan", "opencl", "webgpu"})
_ACCEPTED = (
    "None/'llvm'/'cpu' (this host's CPU), 'cuda' (this host's NVIDIA GPU), a TVM tag such as "
    "'nvidia/nvidia-a100' (see tvm.target.list_tags()), a bare target kind such as 'rocm', a JSON "
    "object or dict such as {\"kind\": \"llvm\", \"mcpu\": \"znver3\"}, a legacy command line "
    "such as 'llvm -mcpu=znver3 -num-cores=4', or a tvm.target.Target"
)

#: ISA extensions (``/proc/cpuinfo`` flag names) that change which tensor program is fastest.
_RELEVANT_ISA = frozenset(
    {
        # x86
        "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
        "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd",
        "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512vbmi",
        # Arm ("Features" line)
        "neon", "asimd", "asimddp", "asimdhp", "fphp", "sve", "sve2", "i8mm", "bf16", "sme",
    }
)  # fmt: skip
_RELEVANT_ISA_PREFIXES = ("amx",)

#: Per-block limits of every NVIDIA GPU since Kepler; used when no tag matches the GPU.
_CUDA_DEFAULT_LIMITS: dict[str, int] = {
    "max_num_threads": 1024,
    "max_threads_per_block": 1024,
    "thread_warp_size": 32,
    "max_shared_memory_per_block": 49152,
    "registers_per_block": 65536,
}


# ---------------------------------------------------------------------------------------------
# Host facts (no TVM needed)
# ---------------------------------------------------------------------------------------------


def physical_cores() -> int:
    """Return the number of physical cores this process may run on (at least 1).

    ``psutil``'s physical count, capped by the CPU affinity mask (containers and ``taskset``),
    falling back to ``os.cpu_count()``.
    """
    logical: int | None = None
    if hasattr(os, "sched_getaffinity"):
        logical = len(os.sched_getaffinity(0))
    physical: int | None = None
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except ImportError:  # pragma: no cover - psutil is a dependency
        physical = None
    counts = [c for c in (physical, logical, os.cpu_count()) if c]
    return max(1, min(counts)) if counts else 1


def cache_bytes() -> dict[int, int]:
    """Return the size in bytes of this host's data caches by level (``{1: 49152, 2: 1048576, ...}``).

    Read from Linux's ``/sys/devices/system/cpu/cpu0/cache``; empty where that is missing (another
    OS, a sandbox), so callers use their own defaults.
    """
    out: dict[int, int] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(base, entry, "type"), encoding="ascii") as f:
                kind = f.read().strip()
            with open(os.path.join(base, entry, "level"), encoding="ascii") as f:
                level = int(f.read().strip())
            with open(os.path.join(base, entry, "size"), encoding="ascii") as f:
                size_text = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size_text:
            continue
        try:
            size = int(size_text[:-1]) * units[size_text[-1]] if size_text[-1] in units else int(size_text)
        except ValueError:
            continue
        out[level] = size
    return out


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """Return the fields of the first processor block of ``/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _cpu_model(fields: Mapping[str, str]) -> str:
    name = fields.get("model name") or fields.get("hardware") or fields.get("cpu model", "")
    if not name:
        # Arm: implementer/part numbers identify the core.
        impl, part = fields.get("cpu implementer"), fields.get("cpu part")
        if impl and part:
            return f"arm implementer {impl} part {part}"
        return platform.processor() or platform.machine()
    name = re.sub(r"\s+", " ", name)
    if not re.search(r"\d", name) and "cpu family" in fields:
        # A generic name ("AMD EPYC" in some VMs) does not tell Zen 3 from Zen 5.
        name += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    return name


def _isa(fields: Mapping[str, str]) -> tuple[str, ...]:
    flags = (fields.get("flags") or fields.get("features") or "").split()
    keep = {f for f in flags if f in _RELEVANT_ISA or f.startswith(_RELEVANT_ISA_PREFIXES)}
    return tuple(sorted(keep))


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi`` reports it.

    Attributes
    ----------
    name
        Product name, e.g. ``"NVIDIA A100-SXM4-80GB"``.
    compute
        Compute capability, e.g. ``"8.0"``.
    """

    name: str
    compute: str

    @property
    def arch(self) -> str:
        """Return the ``sm_XY`` arch of the compute capability."""
        return "sm_" + self.compute.replace(".", "")


@functools.lru_cache(maxsize=1)
def detect_gpus() -> tuple[GpuInfo, ...]:
    """Return the NVIDIA GPUs ``nvidia-smi`` lists (empty without a driver or a GPU)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.splitlines():
        name, sep, cap = line.rpartition(",")
        if sep and re.fullmatch(r"\d+\.\d+", cap.strip()):
            gpus.append(GpuInfo(name.strip(), cap.strip()))
    return tuple(gpus)


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------


def _tvm() -> Any:
    # Targets never need tensor intrinsics: import TVM the cheap way whatever the kind. Code that
    # tunes or applies CUDA schedules calls load_tvm("cuda"), which imports the real ones then.
    return load_tvm("llvm")


@functools.lru_cache(maxsize=1)
def _host_mcpu() -> str:
    tvm = _tvm()
    return str(tvm.target.codegen.llvm_get_system_cpu())


def host_cpu_target(num_cores: int | None = None) -> tvm.target.Target:
    """Return the LLVM target of this host's CPU.

    Parameters
    ----------
    num_cores
        Threads the generated code may use; default: :func:`physical_cores`.

    Returns
    -------
    tvm.target.Target
        ``{"kind": "llvm", "num-cores": n, "mcpu": <host CPU>}``.
    """
    tvm = _tvm()
    cores = physical_cores() if num_cores is None else int(num_cores)
    return tvm.target.Target({"kind": "llvm", "num-cores": cores, "mcpu": _host_mcpu()})


def _tag_for_gpu(gpu: GpuInfo, tags: Mapping[str, Any]) -> str | None:
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.name.lower()).strip("-")
    slug = re.sub(r"^nvidia-", "", slug)
    parts = slug.split("-")
    for n in range(len(parts), 0, -1):
        stem = "-".join(parts[:n])
        variants = {stem, re.sub(r"^tesla-", "", stem)}
        for v in sorted(variants):
            for cand in (f"nvidia/{v}", f"nvidia/nvidia-{v}"):
                if cand in tags:
                    return cand
    return None


def _host_cuda_target() -> tvm.target.Target:
    tvm = _tvm()
    gpus = detect_gpus()
    if not gpus:
        raise TargetError(
            "target 'cuda' means this host's NVIDIA GPU, but nvidia-smi reports none; to compile "
            "for a GPU that is not here, name it with a tag such as 'nvidia/nvidia-a100' or a dict "
            "such as {'kind': 'cuda', 'arch': 'sm_80'}"
        )
    gpu = gpus[0]
    tag = _tag_for_gpu(gpu, tvm.target.list_tags())
    if tag is not None:
        target = tvm.target.Target(tag)
        if str(target.attrs.get("arch", "")).rstrip("af") == gpu.arch:  # sm_90a is an sm_90
            return target
    return tvm.target.Target({"kind": "cuda", "arch": gpu.arch, **_CUDA_DEFAULT_LIMITS})


def _parse_value(key: str, text: str) -> Any:
    if key in ("mattr", "keys", "libs", "cl-opt"):
        return [v for v in text.split(",") if v]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _parse_cli(text: str) -> dict[str, Any]:
    """Parse ``"llvm -mcpu=znver3 -num-cores=4"`` into a target dict."""
    tokens = text.split()
    config: dict[str, Any] = {"kind": tokens[0]}
    for tok in tokens[1:]:
        m = re.fullmatch(r"--?([A-Za-z][\w-]*)(?:=(.*))?", tok)
        if m is None:
            raise TargetError(
                f"cannot parse {tok!r} in target {text!r}; accepted forms: {_ACCEPTED}"
            )
        key, value = m.group(1), m.group(2)
        config[key] = True if value is None else _parse_value(key, value)
    return config


@functools.lru_cache(maxsize=1)
def host_triple() -> str:
    tvm = _tvm()
    return str(tvm.target.codegen.llvm_get_system_triple())


def _check_llvm(cfg: dict[str, Any]) -> None:
    """Reject an ``mcpu`` LLVM does not know; give a host target without ``num-cores`` the host's."""
    tvm = _tvm()
    triple = str(cfg.get("mtriple") or "")
    host = not triple or triple in (host_triple(), _default_triple())
    mcpu = cfg.get("mcpu")
    if isinstance(mcpu, str) and mcpu:
        codegen = tvm.target.codegen
        if not codegen.llvm_is_valid_cpu(mcpu, triple or host_triple()):
            try:
                known = [str(c) for c in codegen.llvm_get_cpu_archlist(tvm.target.Target(
                    {"kind": "llvm", **({"mtriple": triple} if triple else {})}))]
            except Exception:  # noqa: BLE001 - only for the suggestion
                known = []
            hint = did_you_mean(mcpu, known, n=3)
            hint = f"{hint} " if hint else ""
            where = f"the triple {triple}" if triple else f"this host's triple {host_triple()}"
            raise TargetError(
                f"LLVM does not know the CPU mcpu={mcpu!r} for {where} (it would silently compile for a "
                f"generic CPU): {hint}this host's CPU is {_host_mcpu()!r}, what the default target uses; "
                "tvm.target.codegen.llvm_get_cpu_archlist() lists the names LLVM knows"
            )
    if host and "num-cores" not in cfg:
        cfg["num-cores"] = physical_cores()


def _from_dict(config: Mapping[str, Any]) -> tvm.target.Target:
    if "kind" not in config:
        raise TargetError(
            f"target dict {dict(config)!r} has no 'kind'; accepted forms: {_ACCEPTED}"
        )
    kind = str(config["kind"])
    tvm = _tvm()
    cfg = dict(config)
    if kind == "llvm" and cfg.get("mcpu") == "native":
        cfg["mcpu"] = _host_mcpu()
    if kind == "llvm":
        _check_llvm(cfg)
    if kind == "cuda":
        # MetaSchedule's GPU rules read these; TVM leaves most of them unset for a bare dict.
        for key, value in _CUDA_DEFAULT_LIMITS.items():
            cfg.setdefault(key, value)
    try:
        return tvm.target.Target(cfg)
    except (ValueError, RuntimeError, TypeError, AttributeError) as err:
        raise TargetError(
            f"TVM rejects target {cfg!r}: {err}; accepted forms: {_ACCEPTED}"
        ) from err


def resolve_target(target: TargetLike = None) -> tvm.target.Target:
    """Turn a target as a user writes it into a ``tvm.target.Target``.

    Parameters
    ----------
    target
        See the module docstring for every accepted form; ``None`` is this host's CPU.

    Returns
    -------
    tvm.target.Target
        The target to compile and tune for.

    Raises
    ------
    TargetError
        If the target is not one of the accepted forms, TVM rejects it, or ``"cuda"`` was asked
        for on a host without a GPU.

    Examples
    --------
    >>> resolve_target("cpu").kind.name
    'llvm'
    >>> resolve_target({"kind": "cuda", "arch": "sm_80"}).attrs["arch"]
    'sm_80'
    """
    if target is None:
        return host_cpu_target()
    if isinstance(target, Mapping):
        return _from_dict(target)
    if not isinstance(target, str):
        tvm = _tvm()
        if isinstance(target, tvm.target.Target):
            return target
        raise TargetError(f"unsupported target type {type(target).__name__}; accepted: {_ACCEPTED}")
    text = target.strip()
    low = text.lower()
    if low in _HOST_ALIASES or low == "":
        return host_cpu_target()
    if low in _CUDA_ALIASES:
        return _host_cuda_target()
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except ValueError as err:
            raise TargetError(
                f"target {text!r} is not valid JSON ({err}); accepted: {_ACCEPTED}"
            ) from err
        if not isinstance(config, dict):
            raise TargetError(f"target JSON {text!r} is not an object; accepted: {_ACCEPTED}")
        return _from_dict(config)
    if " " in text:
        return _from_dict(_parse_cli(text))
    tvm = _tvm()
    if "/" in text:
        if text not in tvm.target.list_tags():
            raise TargetError(
                f"unknown target tag {text!r} (tvm.target.list_tags() lists the known ones); "
                f"accepted forms: {_ACCEPTED}"
            )
        return tvm.target.Target(text)
    try:
        return tvm.target.Target({"kind": text})
    except (ValueError, RuntimeError, TypeError) as err:
        raise TargetError(f"unknown target {text!r}; accepted forms: {_ACCEPTED}") from err


def _plain(value: Any) -> Any:
    """Turn TVM FFI containers inside an exported target into plain Python values."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (
        hasattr(value, "__len__") and hasattr(value, "__getitem__")
    ):
        return [_plain(v) for v in value]
    return str(value)


@functools.lru_cache(maxsize=1)
def _default_triple() -> str:
    """Return the mtriple TVM fills into an LLVM target that names none."""
    tvm = _tvm()
    return str(_plain(tvm.target.Target({"kind": "llvm"}).export()).get("mtriple", ""))


def target_dict(target: TargetLike) -> dict[str, Any]:
    """Return the target's exported attributes as plain Python values, without ``"tag"``."""
    t = resolve_target(target)
    exported = _plain(t.export())
    if not isinstance(exported, dict):  # pragma: no cover - export() always gives a map
        raise TargetError(f"target {t} exported {exported!r}, not a dict")

    default_triple = _default_triple()

    def strip_tag(d: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in d.items() if k != "tag"}
        # TVM 0.27 sometimes fills in the build's default triple (a target without "mcpu",
        # any target after a TuningRecord round trip) and sometimes not: the default means
        # "this host", so it is left out of the key.
        if out.get("kind") == "llvm" and default_triple and out.get("mtriple") == default_triple:
            del out["mtriple"]
        if isinstance(out.get("host"), dict):
            out["host"] = strip_tag(out["host"])
        return out

    return strip_tag(exported)


def canonical_target(target: TargetLike) -> str:
    """Return the canonical target text of a hardware key (sorted JSON, no ``"tag"``).

    Examples
    --------
    >>> canonical_target({"kind": "llvm", "num-cores": 4, "mcpu": "znver3"})
    '{"keys":["cpu"],"kind":"llvm","mcpu":"znver3","num-cores":4}'
    """
    return canonical_json(target_dict(target))


def target_kind(target: TargetLike) -> str:
    """Return the kind name (``"llvm"``, ``"cuda"``, ...) of a target."""
    return str(resolve_target(target).kind.name)


def host_fingerprint(target: TargetLike = None) -> HostFingerprint:
    """Return what about this machine, beyond the target, decides which program is fastest.

    Parameters
    ----------
    target
        The target the fingerprint is for. GPU targets get the GPU's name and compute
        capability and no CPU fields; CPU targets get the CPU model, relevant ISA flags and the
        physical core count.

    Returns
    -------
    HostFingerprint
        The fingerprint (never includes the host name).
    """
    t = resolve_target(target)
    kind = str(t.kind.name)
    if kind in _GPU_KINDS:
        arch = str(t.attrs.get("arch", "")) if kind == "cuda" else ""
        m = re.fullmatch(r"sm_(\d+)(\d)[af]?", arch)
        compute = f"{m.group(1)}.{m.group(2)}" if m else ""
        name = ""
        if kind == "cuda":
            for gpu in detect_gpus():
                if not arch or gpu.arch == arch.rstrip("af"):
                    name, compute = gpu.name, gpu.compute
                    break
        return HostFingerprint(gpu_name=name, gpu_compute=compute)
    fields = _cpuinfo_fields(_read_cpuinfo())
    return HostFingerprint(cpu_model=_cpu_model(fields), isa=_isa(fields), cores=physical_cores())


def hardware_key(target: TargetLike = None) -> HardwareKey:
    """Return the hardware key of records measured for ``target`` on this machine.

    Parameters
    ----------
    target
        Anything :func:`resolve_target` accepts.

    Returns
    -------
    HardwareKey
        Canonical target, host fingerprint and ``tvm.__version__``.

    Examples
    --------
    >>> hardware_key("cpu").target_kind
    'llvm'
    """
    tvm = _tvm()
    t = resolve_target(target)
    return HardwareKey(
        target=canonical_target(t),
        fingerprint=host_fingerprint(t),
        tvm_version=str(tvm.__version__),
    )
