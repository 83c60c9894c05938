"""The store contract, run against every implementation, and what the SQL store adds to it.

:class:`TestStoreContract` runs :class:`tunecache.testing.store_contract.StoreContract` on an
in-memory SQLite store, an SQLite file, PostgreSQL and an ``OverlayStore`` over two SQL stores.
The other tests cover the SQL store's own promises (files, URLs, schema versions) and what values
read from a store guarantee.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunecache.errors import ReadOnlyStoreError, SchemaVersionError, StoreURLError
from tunecache.store import (
    SCHEMA_VERSION,
    BaseStore,
    HardwareKey,
    OverlayStore,
    Store,
    WorkloadKey,
    normalize_url,
    open_store,
)
from tunecache.testing.store_contract import StoreContract, rec

IMPLEMENTATIONS = ["memory", "sqlite-file", "postgresql", "overlay"]


class TestStoreContract(StoreContract):
    """Every store implementation keeps the contract."""

    @pytest.fixture(params=IMPLEMENTATIONS)
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
        if request.param == "memory":
            s: BaseStore = Store("memory")
        elif request.param == "sqlite-file":
            s = Store(tmp_path / "store.db")
        elif request.param == "postgresql":
            s = Store(request.getfixturevalue("pg_url"))
        elif request.param == "overlay":
            team = tmp_path / "team.db"
            Store(team).close()  # the team's store exists; this user may only read it
            s = open_store(team, overlay="memory")
            assert isinstance(s, OverlayStore) and s.base.read_only
        yield s
        s.close()


# -- the implementations ----------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Store, OverlayStore])
def test_every_implementation_defines_every_contract_method(cls: type[BaseStore]) -> None:
    assert issubclass(cls, BaseStore) and not inspect.isabstract(cls)
    for name in BaseStore.__abstractmethods__:
        assert name in vars(cls), f"{cls.__name__} inherits {name} instead of implementing it"
        mine, theirs = getattr(cls, name), getattr(BaseStore, name)
        if isinstance(theirs, property):
            assert isinstance(mine, property), name
        else:
            assert inspect.signature(mine) == inspect.signature(theirs), name


def test_store_package_imports_neither_sqlalchemy_nor_tvm() -> None:
    code = (
        "import sys, tunecache.store, tunecache.store.keys, tunecache.store.records, tunecache.store.contract, "
        "tunecache.store.values, tunecache.store.overlay, tunecache.store.claims, tunecache.store.location; "
        "assert 'sqlalchemy' not in sys.modules and 'tvm' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('sqlalchemy', 'tvm')))[:5]"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_open_store_opens_or_passes_through(tmp_path: Path) -> None:
    st = open_store("memory")
    assert isinstance(st, Store) and isinstance(st, BaseStore) and not st.persistent
    assert open_store(st) is st
    ov = open_store(st, overlay=Store("memory"))
    assert isinstance(ov, OverlayStore) and ov.base is st and open_store(ov) is ov
    assert open_store(tmp_path / "s.db", read_only=False).backend == "sqlite"


# -- values read from a store -------------------------------------------------------------------


def test_values_outlive_their_store(tmp_path: Path, hw: HardwareKey, wk: WorkloadKey) -> None:
    with Store(tmp_path / "s.db") as st:
        st.commit_record(rec(wk, hw, 1e-3))
        (got,) = st.best_k(wk, hw)
    assert got.latency_s == 1e-3  # values outlive their store


# -- the SQL store: files, URLs, schema versions ----------------------------------------------


def test_reopen_sees_committed_records(store_url: str, wk: WorkloadKey, hw: HardwareKey) -> None:
    if store_url == "memory":
        pytest.skip("an in-memory store ends with its process")
    s1 = Store(store_url)
    s1.commit_record(rec(wk, hw, 1e-3))
    s1.close()
    s2 = Store(store_url)
    assert len(s2.best_k(wk, hw, 1)) == 1
    s2.close()


def test_read_only_store_serves_but_refuses_writes(store_url: str, wk: WorkloadKey, hw: HardwareKey) -> None:
    if store_url == "memory":
        pytest.skip("read-only needs a persistent store")
    Store(store_url).commit_record(rec(wk, hw, 1e-3))
    ro = Store(store_url, read_only=True)
    assert ro.read_only
    assert len(ro.best_k(wk, hw, 1)) == 1
    with pytest.raises(ReadOnlyStoreError):
        ro.commit_record(rec(wk, hw, 2e-3))
    with pytest.raises(ReadOnlyStoreError):
        ro.put_derived("cost_model/" + hw.id, "{}")
    assert ro.get_derived("cost_model/" + hw.id) is None


def test_newer_schema_is_refused_with_upgrade_hint(store_url: str) -> None:
    if store_url == "memory":
        pytest.skip("needs a persistent store")
    from sqlalchemy import create_engine, text

    Store(store_url).close()
    eng = create_engine(normalize_url(store_url))
    with eng.begin() as c:
        c.execute(text("UPDATE tc_meta SET value='99' WHERE key='schema_version'"))
    eng.dispose()
    with pytest.raises(SchemaVersionError, match="newer"):
        Store(store_url)


def test_older_schema_names_the_upgrade_command(store_url: str) -> None:
    if store_url == "memory":
        pytest.skip("needs a persistent store")
    from sqlalchemy import create_engine, text

    Store(store_url).close()
    eng = create_engine(normalize_url(store_url))
    with eng.begin() as c:
        c.execute(text("UPDATE tc_meta SET value='0' WHERE key='schema_version'"))
    eng.dispose()
    with pytest.raises(SchemaVersionError, match="tunecache db upgrade"):
        Store(store_url)


def test_unknown_url_scheme() -> None:
    with pytest.raises(StoreURLError, match="unknown store URL scheme 'mysql'"):
        Store("mysql://localhost/db")


def test_default_url_comes_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNECACHE_DB", str(tmp_path / "x.db"))
    assert normalize_url(None) == "sqlite:///" + str(tmp_path / "x.db")
    monkeypatch.delenv("TUNECACHE_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert normalize_url(None) == "sqlite:///" + str(tmp_path / "cache" / "tunecache" / "tunecache.db")


def test_first_released_schema_upgrades_with_its_records(tmp_path: Path) -> None:
    import shutil

    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store_v1.sqlite", path)
    with pytest.raises(SchemaVersionError, match="tunecache db upgrade"):
        Store(str(path))
    proc = subprocess.run(
        [sys.executable, "-m", "tunecache.cli.main", "db", "upgrade", "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"schema v1 -> v{SCHEMA_VERSION}" in proc.stdout
    s = Store(str(path))
    assert s.schema_version == SCHEMA_VERSION and s.count_records() == 6
    hw = HardwareKey.from_dict(
        {
            "target": '{"keys":["cpu"],"kind":"llvm","mcpu":"znver3","num-cores":2}',
            "fingerprint": {"cpu_model": "AMD EPYC 7B13", "isa": ["avx2", "fma"], "cores": 2},
            "tvm_version": "0.27.0.post1",
        }
    )
    assert [r.uid for r in s.best_k(WorkloadKey("old1"), hw, 2)] == ["v1rec10", "v1rec11"]
    assert s.claim(WorkloadKey("old1"), hw, "me", 10)
    from tunecache.store import check_store

    assert check_store(s).ok
