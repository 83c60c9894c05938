"""Shared fixtures: store backends (in-memory SQLite, SQLite file, real PostgreSQL) and keys."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tunecache.store import HardwareKey, HostFingerprint, Store, WorkloadKey

PG_URL = os.environ.get("TUNECACHE_TEST_PG_URL", "")


def _pg_database() -> Iterator[str]:
    """Create a fresh PostgreSQL database for one test; drop it afterwards."""
    if not PG_URL:
        if os.environ.get("CI"):
            pytest.fail("TUNECACHE_TEST_PG_URL is not set: run the tests through tools/test.sh")
        pytest.skip("no PostgreSQL server: run through tools/test.sh to start one")
    import psycopg

    name = "tc_" + uuid.uuid4().hex[:12]
    admin = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["memory", "sqlite-file", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A URL of an empty store, for every backend."""
    if request.param == "memory":
        yield "memory"
    elif request.param == "sqlite-file":
        yield str(tmp_path / "store.db")
    else:
        yield from _pg_database()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL of an empty PostgreSQL database."""
    yield from _pg_database()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    yield s
    s.close()


@pytest.fixture
def hw() -> HardwareKey:
    return HardwareKey(
        target='{"keys":["cpu"],"kind":"llvm","mcpu":"znver3","num-cores":2}',
        fingerprint=HostFingerprint("AMD EPYC 7B13", ("avx2", "fma"), 2),
        tvm_version="0.27.0.post1",
    )


@pytest.fixture
def wk() -> WorkloadKey:
    return WorkloadKey("1234567890")


# -- TVM fixtures shared by the tests that compile or measure ---------------------------------


@pytest.fixture(scope="module")
def tvm():
    """The ``tvm`` package, imported with only the LLVM intrinsics."""
    from tunecache.tvm_layer import load_tvm

    return load_tvm("llvm")


@pytest.fixture(scope="module")
def target(tvm):
    """This host's CPU target (LLVM with the detected ``mcpu`` and physical cores)."""
    from tunecache.tvm_layer.target import resolve_target

    return resolve_target(None)


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory):
    """tunecache's build-worker pool, closed after the module."""
    from tunecache.search import make_builder

    b = make_builder(max_workers=2, artifact_dir=tmp_path_factory.mktemp("artifacts"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def runner():
    """MetaSchedule's local runner with tunecache's measurement settings."""
    from tunecache.search import make_runner

    r = make_runner()
    yield r
    pool = getattr(r, "pool", None)
    if pool is not None:
        pool.shutdown(wait=True)


@pytest.fixture(autouse=True)
def _library_cache_dir(tmp_path_factory, monkeypatch) -> None:
    """Built libraries go to a directory of this test session, never the user's cache."""
    monkeypatch.setenv("TUNECACHE_LIB_CACHE", str(tmp_path_factory.getbasetemp() / "libcache"))
