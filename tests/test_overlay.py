"""Read-only team store (a PostgreSQL role with SELECT only) with a local overlay, and push.

The contract tests (tests/test_store_contract.py) run ``OverlayStore`` too; here are the
differences its docstring documents: writes go to the overlay only, counts add up, listings
put the overlay first.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import tunecache
from tunecache.errors import ReadOnlyStoreError
from tunecache.store import OverlayStore, Store, WorkloadDesc, WorkloadKey, open_store
from tunecache.store.overlay import push
from tunecache.testing.store_contract import rec


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


@pytest.mark.tvm
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


@pytest.fixture
def team_file(tmp_path, hw, wk):
    """A team SQLite file with one workload and two records, and an overlay over it (read-only)."""
    path = tmp_path / "team.db"
    with Store(path) as t:
        t.commit_workload(wk, WorkloadDesc("mm", "matmul"), "TEAMMOD")
        t.commit_records([rec(wk, hw, 2e-3), rec(wk, hw, 4e-3)])
    ov = open_store(path, overlay=tmp_path / "mine.db")
    assert isinstance(ov, OverlayStore)
    yield path, ov
    ov.close()


def test_overlay_writes_never_reach_the_team_store(team_file, hw, wk) -> None:
    path, ov = team_file
    theirs = ov.base.best_k(wk, hw, 1)[0]
    ov.commit_record(rec(wk, hw, 1e-3))
    ov.set_latency(theirs.uid, 9.0)  # a team record: not in the overlay, nothing changes
    ov.mark_stale([theirs.uid])
    ov.mark_done(WorkloadKey("other"), hw)
    assert ov.claim(wk, hw, "me", 60) and ov.claim_holder(wk, hw) == "me"
    assert ov.gc(keep_top=1) == 0
    with Store(path) as team:
        assert team.count_records() == 2 and team.best_k(wk, hw, 1)[0] == theirs
        assert team.claim_holder(wk, hw) is None and not team.is_done(WorkloadKey("other"), hw)
    assert ov.is_done(WorkloadKey("other"), hw)
    assert [r.latency_s for r in ov.best_k(wk, hw, 3)] == [1e-3, 2e-3, 4e-3]


def test_overlay_reads_the_teams_derived_documents_and_keeps_its_own(team_file) -> None:
    path, ov = team_file
    with Store(path) as team:
        team.put_derived("cost_model/x", "team")
    assert ov.get_derived("cost_model/x") == "team" and ov.get_derived("other") is None
    ov.put_derived("cost_model/x", "mine")
    assert ov.get_derived("cost_model/x") == "mine"
    with Store(path) as team:
        assert team.get_derived("cost_model/x") == "team"


def test_overlay_counts_add_up_and_listings_put_the_overlay_first(team_file, hw, wk) -> None:
    _path, ov = team_file
    team_recs = ov.base.records()
    mine = rec(wk, hw, 3e-3)
    ov.commit_record(mine)
    assert ov.count_records() == 3 and ov.count_records(hw, workload=wk) == 3
    assert [r.uid for r in ov.records()] == [mine.uid] + [r.uid for r in team_recs]
    assert [r.uid for r in ov.records(limit=2)] == [mine.uid, team_recs[0].uid]
    assert ov.stats().records == 1  # the overlay's
    ov.commit_records(team_recs)  # the same uids in both: listed once, counted twice
    assert len(ov.records()) == 3 and ov.count_records() == 5


def test_overlay_workloads_come_from_both(team_file, hw, wk) -> None:
    _path, ov = team_file
    ov.commit_workload(wk)  # completed from the team store
    assert ov.overlay.get_workload(wk).mod_json == "TEAMMOD"
    assert ov.overlay.get_workload(wk).desc.family == "matmul"
    ov.commit_workload(WorkloadKey("new"), WorkloadDesc("conv", "conv2d"))
    assert {w.key for w in ov.workloads()} == {wk, WorkloadKey("new")}
    assert ov.has_workload(WorkloadKey("new")) and ov.get_workload(WorkloadKey("new")).mod_json == ""
    assert "over" in ov.display_url and ov.url == ov.overlay.url and not ov.read_only


def test_overlay_explains_misses_against_both(team_file, hw, wk) -> None:
    from dataclasses import replace

    _path, ov = team_file
    other = replace(hw, tvm_version="0.1")
    ov.commit_record(rec(WorkloadKey("x"), other, 1e-3))
    assert "tvm_version" in ov.explain_miss(WorkloadKey("x"), hw).reason
    failed_only = WorkloadKey("failed")
    ov.commit_record(rec(failed_only, hw, None))
    assert ov.best_k(failed_only, hw) == [] and ov.explain_miss(failed_only, hw).closest == hw
    assert "none is valid and fresh" in ov.explain_miss(failed_only, hw).reason


def test_push_copies_once_and_refuses_a_read_only_team_store(team_file, tmp_path, hw, wk) -> None:
    path, ov = team_file
    ov.commit_workload(WorkloadKey("new"), WorkloadDesc("conv", "conv2d"), "NEWMOD")
    ov.commit_records([rec(WorkloadKey("new"), hw, 1e-3), rec(wk, hw, 5e-3)])
    with pytest.raises(ReadOnlyStoreError):
        push(ov.overlay, ov.base)
    with Store(path) as team:
        assert push(ov.overlay, team) == (2, 2)
        assert push(ov.overlay, team) == (2, 0)
        assert team.count_records() == 4 and team.get_workload(WorkloadKey("new")).mod_json == "NEWMOD"
