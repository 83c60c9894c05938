"""Keys: stable ids, JSON round trips, miss explanations."""

from __future__ import annotations

import doctest

import tunecache.store.keys as keys
from tunecache.store import HardwareKey, HostFingerprint, WorkloadDesc, explain_miss


def test_hardware_id_is_stable_and_complete() -> None:
    a = HardwareKey('{"kind":"llvm"}', HostFingerprint("AMD EPYC", ("fma", "avx2"), 2), "0.27")
    b = HardwareKey('{"kind":"llvm"}', HostFingerprint("AMD EPYC", ("avx2", "fma"), 2), "0.27")
    assert a == b and a.id == b.id  # ISA order does not matter
    assert HardwareKey.from_dict(a.to_dict()) == a
    for other in (
        HardwareKey('{"kind":"llvm","mcpu":"x"}', a.fingerprint, "0.27"),
        HardwareKey(a.target, HostFingerprint("AMD EPYC", ("avx2",), 2), "0.27"),
        HardwareKey(a.target, HostFingerprint("AMD EPYC", ("avx2", "fma"), 4), "0.27"),
        HardwareKey(a.target, a.fingerprint, "0.28"),
    ):
        assert other.id != a.id


def test_explain_miss_picks_the_closest_key() -> None:
    q = HardwareKey('{"kind":"llvm","mcpu":"znver3"}', HostFingerprint("AMD", ("avx2",), 2), "0.27")
    far = HardwareKey('{"kind":"cuda"}', HostFingerprint("", (), 0, "A100", "8.0"), "0.26")
    near = HardwareKey('{"kind":"llvm","mcpu":"znver3"}', HostFingerprint("AMD", ("avx2",), 2), "0.26")
    ex = explain_miss(q, [far, near])
    assert ex.closest == near
    assert ex.differences == ("tvm_version ('0.26' stored vs '0.27' queried)",)


def test_desc_round_trip() -> None:
    d = WorkloadDesc("fused_conv2d_add_relu", "conv2d", ((1, 64, 56, 56),), ("float32",), (1, 64, 56, 56, 64, 3, 3))
    assert WorkloadDesc.from_dict(d.to_dict()) == d


def test_doctests() -> None:
    assert doctest.testmod(keys).failed == 0
