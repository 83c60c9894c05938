"""The record and import decoders on hostile input: only TunecacheError subclasses come out,
and rejected entries never reach the store."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunecache.errors import InvalidRecordError, TunecacheError
from tunecache.store import HardwareKey, Provenance, Record, Store, WorkloadKey
from tunecache.store.records import (
    MAX_DEPTH,
    decode_args_info,
    decode_json_text,
    decode_run_secs,
    decode_trace,
    decode_trace_text,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=40,
)

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(json_values)
def test_decoders_raise_only_tunecache_errors(value: object) -> None:
    for fn in (decode_trace, decode_run_secs, decode_args_info, Provenance.from_dict):
        try:
            fn(value)  # type: ignore[operator]
        except TunecacheError:
            pass


@SETTINGS
@given(st.text(max_size=200) | st.binary(max_size=200))
def test_json_text_decoder_raises_only_tunecache_errors(text: object) -> None:
    try:
        decode_json_text(text)
    except TunecacheError:
        pass


@SETTINGS
@given(json_values, st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(), max_size=4))
def test_rejected_records_leave_the_store_untouched(trace: object, secs: list) -> None:
    store = Store("memory")
    hw = HardwareKey('{"kind":"llvm"}', tvm_version="0.27")
    try:
        r = Record.from_measurement(WorkloadKey("w"), hw, trace, secs, None, Provenance())
    except TunecacheError:
        assert store.count_records() == 0
        return
    store.commit_record(r)
    assert store.count_records() == 1


@SETTINGS
@given(json_values | st.tuples(st.lists(st.tuples(st.sampled_from(["Split", "x y"]), st.lists(st.integers()),
                                                  st.lists(json_values, max_size=2), st.just([])).map(list),
                                        max_size=3),
                               st.lists(st.tuples(st.integers(-1, 3), json_values).map(list), max_size=2)).map(list))
def test_a_stored_trace_decodes_as_the_walking_decoder_says(value: object) -> None:
    """A store reads traces with :func:`decode_trace_text` (numbers checked while parsing, no walk
    over every value): for any JSON, the same trace or the same refusal as decode_trace."""
    text = json.dumps(value)
    try:
        want: object = decode_trace(value)
    except InvalidRecordError:
        want = InvalidRecordError
    try:
        got: object = decode_trace_text(text)
    except InvalidRecordError:
        got = InvalidRecordError
    assert got == want


def test_nesting_and_numbers_are_checked_in_stored_text() -> None:
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert decode_json_text(deepest) is not None
    with pytest.raises(InvalidRecordError, match="nested deeper"):
        decode_json_text("[" + deepest + "]")
    with pytest.raises(InvalidRecordError, match="nested deeper"):
        decode_json_text('{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1))
    assert decode_json_text('["[[[[", {"k": "]]"}]') == ["[[[[", {"k": "]]"}]
    with pytest.raises(InvalidRecordError, match="out of range"):
        decode_trace_text(json.dumps([[["Split", [2**70], [], []]], []]))
    with pytest.raises(InvalidRecordError, match="non-finite"):
        decode_trace_text('[[["Split", [1e400], [], []]], []]')
    trace = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SamplePerfectTile", ["b0"], [4, 64], ["v1"]]], [[1, [2, 2]]]]
    assert decode_trace_text(json.dumps(trace)) == trace


def test_deeply_nested_json_is_rejected() -> None:
    with pytest.raises(InvalidRecordError, match="nested"):
        decode_json_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidRecordError, match="nested"):
        decode_json_text("[" * 50 + "]" * 50)


@pytest.mark.parametrize(
    "bad, msg",
    [
        ("[1e400]", "non-finite|not valid"),
        ("[NaN]", "non-finite"),
        ('{"a": ', "not valid JSON"),
        (b"\xff\xfe", "UTF-8"),
    ],
)
def test_bad_json_text(bad: object, msg: str) -> None:
    with pytest.raises(InvalidRecordError, match=msg):
        v = decode_json_text(bad)
        decode_run_secs(v)


def test_trace_checks() -> None:
    ok = [[["GetSBlock", [], ["C", "main"], ["b0"]]], []]
    assert decode_trace(ok) == ok
    with pytest.raises(InvalidRecordError, match="does not exist"):
        decode_trace([[["GetSBlock", [], [], []]], [[5, 1]]])
    with pytest.raises(InvalidRecordError, match="invalid kind"):
        decode_trace([[["rm -rf /", [], [], []]], []])
    with pytest.raises(InvalidRecordError, match="out of range"):
        decode_trace([[["Split", [2**70], [], []]], []])


def test_run_secs_checks() -> None:
    assert decode_run_secs([0.001, 2]) == (0.001, 2.0)
    for bad in ([-1.0], ["1"], [True], [1e12], 5):
        with pytest.raises(InvalidRecordError):
            decode_run_secs(bad)


def test_failed_measurement_has_no_latency() -> None:
    hw = HardwareKey('{"kind":"llvm"}')
    r = Record.from_measurement(WorkloadKey("w"), hw, [[], []], [1e10], None, Provenance())
    assert r.latency_s is None and not r.is_valid
    r = Record.from_measurement(WorkloadKey("w"), hw, [[], []], [1e-3, 3e-3], None, Provenance())
    assert r.latency_s == pytest.approx(2e-3)


def test_provenance_kind_is_checked() -> None:
    with pytest.raises(InvalidRecordError, match="provenance kind"):
        Provenance(kind="stolen")
    assert json.loads(json.dumps(Provenance(kind="reused").to_dict()))["kind"] == "reused"


@pytest.mark.tvm
def test_import_lines_raise_only_per_entry_errors_and_never_touch_the_store(tmp_path_factory) -> None:
    """Hostile record lines next to one good workload line: every bad line becomes one reported
    error, no exception escapes, and nothing of a rejected line reaches the store."""
    from hypothesis import given as hgiven

    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.jsondb import RECORD_FILE, WORKLOAD_FILE, import_jsondb

    tvm = load_tvm()
    from tvm import te

    a = te.placeholder((8, 8), name="A")
    b = te.compute((8, 8), lambda i, j: a[i, j] * 2, name="B")
    key, mod_json, _ = workload_of(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    d = tmp_path_factory.mktemp("jdb")
    (d / WORKLOAD_FILE).write_text(json.dumps([key.shash, mod_json]) + "\n")
    line = st.one_of(
        st.text(max_size=60),
        json_values.map(json.dumps),
        st.tuples(st.integers(-2, 2), json_values).map(lambda t: json.dumps([t[0], t[1]])),
        st.tuples(json_values, json_values, json_values).map(
            lambda t: json.dumps([0, [t[0], t[1], {"kind": "llvm"}, t[2]]])),
    )

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @hgiven(st.lists(line, min_size=1, max_size=4))
    def check(lines: list[str]) -> None:
        (d / RECORD_FILE).write_text("\n".join(lines) + "\n")
        store = Store("memory")
        rep = import_jsondb(store, d)
        assert store.count_records() == rep.new_records == rep.records
        physical = [x for x in "\n".join(lines).splitlines() if x.strip()]  # as the importer reads them
        assert rep.records + len(rep.errors) == len(physical)

    check()
