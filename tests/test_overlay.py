"""Read-only team store (a PostgreSQL role with SELECT only) with a local overlay, and push."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tunecache
from tunecache.errors import ReadOnlyStoreError
from tunecache.store import Store, open_store

pytestmark = pytest.mark.tvm


@pytest.fixture
def team(pg_url: str):
    """A team store filled by a writer, and a URL of a SELECT-only role on it."""
    import psycopg
    from _models import relax_matmul_relu

    cm = tunecache.compile(relax_matmul_relu(16, 32, 16), store=pg_url, trials_per_task=2, seed=1, progress=False)
    assert cm.report.count("tuned") >= 1
    db = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='tc_reader') "
                  "THEN CREATE ROLE tc_reader LOGIN; END IF; END $$")
        c.execute(f'GRANT CONNECT ON DATABASE "{db}" TO tc_reader')
        c.execute("GRANT USAGE ON SCHEMA public TO tc_reader")
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO tc_reader")
    reader = pg_url.replace("postgres@", "tc_reader@", 1)
    yield pg_url, reader
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM tc_reader")
        c.execute("REVOKE ALL ON SCHEMA public FROM tc_reader")
        c.execute(f'REVOKE ALL ON DATABASE "{db}" FROM tc_reader')


def test_read_only_team_store_serves_hits_and_misses_land_in_the_overlay(team, tmp_path) -> None:
    from _models import relax_matmul_relu

    writer_url, reader_url = team
    team_records = Store(writer_url).count_records()
    overlay = str(tmp_path / "overlay.db")

    # The role really is read-only: a write is refused with a clear error.
    with pytest.raises(ReadOnlyStoreError):
        Store(reader_url).commit_workload(tunecache.store.WorkloadKey("x"))

    hit = tunecache.compile(relax_matmul_relu(16, 32, 16), store=reader_url, overlay=overlay, progress=False)
    assert hit.report.trials == 0 and hit.report.count("hit") >= 1 and hit.report.count("fallback") == 0
    assert Store(overlay).count_records() == 0

    miss = tunecache.compile(relax_matmul_relu(32, 32, 16), store=reader_url, overlay=overlay,
                             trials_per_task=2, seed=2, progress=False)
    assert miss.report.count("tuned") >= 1
    assert Store(overlay).count_records() > 0
    assert Store(writer_url).count_records() == team_records  # the team store is untouched

    again = tunecache.compile(relax_matmul_relu(32, 32, 16), store=reader_url, overlay=overlay, progress=False)
    assert again.report.trials == 0 and again.report.count("hit") == miss.report.count("tuned")

    # push: refused for the reader, accepted for the writer, idempotent.
    cli = [sys.executable, "-m", "tunecache.cli.main", "db", "push", "--overlay", overlay, "--db"]
    refused = subprocess.run(cli + [reader_url], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "read-only" in refused.stderr and "Traceback" not in refused.stderr
    ok = subprocess.run(cli + [writer_url], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    n_overlay = Store(overlay).count_records()
    assert Store(writer_url).count_records() == team_records + n_overlay
    assert f"({n_overlay} new)" in ok.stdout
    ok2 = subprocess.run(cli + [writer_url], capture_output=True, text=True, timeout=300)
    assert "(0 new)" in ok2.stdout

    # After the push a plain compile against the team store is all hits.
    final = tunecache.compile(relax_matmul_relu(32, 32, 16), store=reader_url, tune="never", progress=False)
    assert final.report.count("hit") == miss.report.count("tuned")


def test_overlay_best_k_prefers_the_better_record(tmp_path, hw, wk) -> None:
    from tunecache.store import Provenance, Record

    base, mine = Store(str(tmp_path / "b.db")), Store(str(tmp_path / "o.db"))
    tr = [[["GetSBlock", [], ["C", "main"], ["b0"]]], []]
    base.commit_record(Record(wk, hw, tr, (2e-3,), 2e-3, None, Provenance()))
    mine.commit_record(Record(wk, hw, tr, (1e-3,), 1e-3, None, Provenance()))
    ov = open_store(base, overlay=mine)
    assert [r.latency_s for r in ov.best_k(wk, hw, 2)] == [1e-3, 2e-3]
    assert ov.count_records() == 2
