"""Targets and hardware keys: resolving what users write, canonical keys, host fingerprints.

Nothing here compiles; importing TVM (~3 s with stubbed intrinsics) is the only cost.
"""

from __future__ import annotations

import json

import pytest

from tunecache.errors import TargetError
from tunecache.store.keys import HardwareKey
from tunecache.tvm_layer import target as tg


@pytest.fixture(scope="module")
def tvm():
    from tunecache.tvm_layer import load_tvm

    return load_tvm("llvm")


# --- resolve_target ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, "llvm", "cpu", "host", " CPU "])
def test_host_aliases_give_the_host_cpu_not_native(tvm, spec):
    t = tg.resolve_target(spec)
    assert t.kind.name == "llvm"
    mcpu = str(t.attrs["mcpu"])
    assert mcpu == tvm.target.codegen.llvm_get_system_cpu()
    assert mcpu not in ("native", "generic", "")
    assert int(t.attrs["num-cores"]) == tg.physical_cores() >= 1


def test_mcpu_native_in_a_dict_becomes_the_host_cpu(tvm):
    t = tg.resolve_target({"kind": "llvm", "mcpu": "native"})
    assert str(t.attrs["mcpu"]) == tvm.target.codegen.llvm_get_system_cpu()


def test_json_dict_cli_and_target_forms_agree(tvm):
    want = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
    a = tg.resolve_target(want)
    b = tg.resolve_target(json.dumps(want))
    c = tg.resolve_target("llvm -mcpu=skylake-avx512 -num-cores=4")
    d = tg.resolve_target(tvm.target.Target(want))
    assert len({tg.canonical_target(x) for x in (a, b, c, d)}) == 1


def test_cli_lists(tvm):
    t = tg.resolve_target("llvm -mcpu=znver3 -mattr=+avx2,+fma")
    assert [str(x) for x in t.attrs["mattr"]] == ["+avx2", "+fma"]


def test_tag(tvm):
    t = tg.resolve_target("nvidia/nvidia-a100")
    assert t.kind.name == "cuda"
    assert str(t.attrs["arch"]) == "sm_80"
    assert int(t.attrs["max_threads_per_block"]) == 1024


def test_cuda_dict_gets_the_limits_metaschedule_reads(tvm):
    t = tg.resolve_target({"kind": "cuda", "arch": "sm_86"})
    for key in ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size"):
        assert key in t.attrs
    assert str(t.attrs["arch"]) == "sm_86"


def test_plain_cuda_without_a_gpu_says_to_use_a_tag(tvm, monkeypatch):
    monkeypatch.setattr(tg, "detect_gpus", lambda: ())
    with pytest.raises(TargetError, match="nvidia/nvidia-a100"):
        tg.resolve_target("cuda")


@pytest.mark.parametrize(
    ("name", "cap", "tag"),
    [
        ("NVIDIA A100-SXM4-80GB", "8.0", "nvidia/nvidia-a100"),
        ("NVIDIA H100 80GB HBM3", "9.0", "nvidia/nvidia-h100"),
        ("Tesla T4", "7.5", "nvidia/nvidia-t4"),
        ("NVIDIA GeForce RTX 3090", "8.6", "nvidia/geforce-rtx-3090"),
    ],
)
def test_plain_cuda_maps_the_detected_gpu_to_its_tag(tvm, monkeypatch, name, cap, tag):
    gpu = tg.GpuInfo(name, cap)
    assert tg._tag_for_gpu(gpu, tvm.target.list_tags()) == tag
    monkeypatch.setattr(tg, "detect_gpus", lambda: (gpu,))
    t = tg.resolve_target("cuda")
    assert str(t.attrs["arch"]).rstrip("a") == gpu.arch  # the H100 tag says sm_90a
    assert tg.canonical_target(t) == tg.canonical_target(tag)


def test_plain_cuda_with_an_untagged_gpu_gets_an_explicit_arch(tvm, monkeypatch):
    monkeypatch.setattr(tg, "detect_gpus", lambda: (tg.GpuInfo("NVIDIA H200", "9.0"),))
    t = tg.resolve_target("gpu")
    assert str(t.attrs["arch"]) == "sm_90"
    assert int(t.attrs["max_shared_memory_per_block"]) == 49152


def test_bare_kind(tvm):
    assert tg.resolve_target("vulkan").kind.name == "vulkan"


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no-such-kind", "accepted forms"),
        ("nvidia/no-such-gpu", "list_tags"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "accepted forms"),
        ({"mcpu": "znver3"}, "no 'kind'"),
        ({"kind": "llvm", "num-cores": "many"}, "TVM rejects"),
        ("llvm mcpu=znver3", "cannot parse"),
        ("llvm -mcpu=znver", "does not know the CPU mcpu='znver'.*did you mean 'znver"),
        (42, "unsupported target type int"),
    ],
)
def test_bad_targets_raise_target_error_naming_accepted_forms(tvm, spec, match):
    with pytest.raises(TargetError, match=match):
        tg.resolve_target(spec)


def test_the_host_cpu_named_on_a_command_line_is_the_default_target(tvm):
    """``--target "llvm -mcpu=<host cpu>"`` had no num-cores, so its hardware key differed from
    the default target's ("differs in target.num-cores (2 stored vs None queried)"): 0 hits."""
    host = tvm.target.codegen.llvm_get_system_cpu()
    assert tg.hardware_key(f"llvm -mcpu={host}") == tg.hardware_key(None)
    assert tg.hardware_key({"kind": "llvm", "mcpu": host}) == tg.hardware_key("llvm")
    assert int(tg.resolve_target("llvm -mcpu=skylake").attrs["num-cores"]) == tg.physical_cores()
    assert int(tg.resolve_target("llvm -mcpu=skylake -num-cores=3").attrs["num-cores"]) == 3  # a given count stays


@pytest.mark.parametrize("spec", ["llvm -mcpu=nonexistent_cpu", {"kind": "llvm", "mcpu": "skylakee"},
                                  {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "skylake"}])
def test_a_cpu_llvm_does_not_know_is_an_error_not_a_generic_cpu(tvm, spec):
    """LLVM compiles for a generic CPU when it does not know ``mcpu``: a typo cost all speed."""
    with pytest.raises(TargetError, match="LLVM does not know the CPU"):
        tg.resolve_target(spec)
    with pytest.raises(TargetError, match="skylake"):  # a near miss is suggested
        tg.resolve_target("llvm -mcpu=skylakee")
    assert tg.resolve_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"})


# --- keys ----------------------------------------------------------------------------------------


def test_canonical_target_is_sorted_plain_json_without_tag(tvm):
    text = tg.canonical_target({"kind": "llvm", "num-cores": 4, "mcpu": "znver3"})
    assert text == '{"keys":["cpu"],"kind":"llvm","mcpu":"znver3","num-cores":4}'
    assert "tag" not in json.loads(tg.canonical_target("nvidia/nvidia-a100"))


def test_hardware_key_of_the_host(tvm):
    key = tg.hardware_key()
    assert isinstance(key, HardwareKey)
    assert key.target_kind == "llvm"
    assert key.tvm_version == tvm.__version__
    fp = key.fingerprint
    assert fp.cpu_model and fp.cores == tg.physical_cores()
    assert set(fp.isa) <= tg._RELEVANT_ISA | {f for f in fp.isa if f.startswith("amx")}
    assert key == tg.hardware_key("cpu")  # stable, hashable value
    assert HardwareKey.from_dict(key.to_dict()) == key


def test_gpu_fingerprint_has_no_cpu_fields_and_a_compute_capability(tvm, monkeypatch):
    monkeypatch.setattr(tg, "detect_gpus", lambda: ())
    fp = tg.hardware_key("nvidia/nvidia-a100").fingerprint
    assert (fp.cpu_model, fp.isa, fp.cores) == ("", (), 0)
    assert fp.gpu_compute == "8.0" and fp.gpu_name == ""
    monkeypatch.setattr(tg, "detect_gpus", lambda: (tg.GpuInfo("NVIDIA A100-PCIE-40GB", "8.0"),))
    assert tg.host_fingerprint("nvidia/nvidia-a100").gpu_name == "NVIDIA A100-PCIE-40GB"
    # A GPU of another arch is not the one the target is for.
    assert tg.host_fingerprint({"kind": "cuda", "arch": "sm_90"}).gpu_name == ""
    assert tg.host_fingerprint({"kind": "cuda", "arch": "sm_100"}).gpu_compute == "10.0"


def test_mcpu_changes_the_key(tvm):
    a = tg.hardware_key({"kind": "llvm", "mcpu": "znver3"})
    b = tg.hardware_key({"kind": "llvm", "mcpu": "skylake"})
    assert a.id != b.id


# --- /proc/cpuinfo parsing -----------------------------------------------------------------------

_CPUINFO_GENERIC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 sse4_2 avx avx2 fma bmi2 avx512f avx512bw avx512_vnni amx_tile sha_ni

processor\t: 1
model name\t: ignored
"""

_CPUINFO_ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve i8mm bf16
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


def test_cpuinfo_generic_model_name_gets_family_and_model():
    fields = tg._cpuinfo_fields(_CPUINFO_GENERIC)
    assert tg._cpu_model(fields) == "AMD EPYC (family 25 model 1)"
    assert tg._isa(fields) == ("amx_tile", "avx", "avx2", "avx512_vnni", "avx512bw", "avx512f",
                               "fma", "sse4_2")  # fmt: skip


def test_cpuinfo_specific_model_name_is_kept():
    fields = tg._cpuinfo_fields("model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n"
                                "cpu family\t: 6\n")  # fmt: skip
    assert tg._cpu_model(fields) == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"


def test_cpuinfo_arm():
    fields = tg._cpuinfo_fields(_CPUINFO_ARM)
    assert tg._cpu_model(fields) == "arm implementer 0x41 part 0xd40"
    assert tg._isa(fields) == ("asimd", "asimddp", "asimdhp", "bf16", "fphp", "i8mm", "sve")


def test_gpu_arch():
    assert tg.GpuInfo("x", "8.6").arch == "sm_86"
    assert tg.GpuInfo("x", "10.0").arch == "sm_100"


def _runtime_threads(env: dict[str, str]) -> int:
    import os
    import subprocess
    import sys

    code = ("from tunecache.tvm_layer import load_tvm; tvm = load_tvm(); "
            "print(tvm.get_global_func('runtime.NumThreads')())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"} | env)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_tvm_runtime_uses_every_physical_core_unless_told_otherwise() -> None:
    """TVM 0.27 alone takes half the logical CPUs on x86 (1 thread on this 2-vCPU machine)."""
    assert _runtime_threads({}) == tg.physical_cores()
    assert _runtime_threads({"TVM_NUM_THREADS": "1"}) == 1  # the user's setting wins
