"""How stores are opened: strict locations, reads that create nothing, read-only team stores.

The read-only checks run **as an unprivileged user**: the tests run as root in CI, and root may
write any file, so a subprocess drops to ``nobody`` (``setpriv``, else ``runuser``) and opens a
store file and directory owned by root with modes 0444 and 0555, as on a read-only mount. Run as
an ordinary user, the subprocess is simply that user (who cannot write a 0444 file in a 0555
directory either).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunecache.errors import ConfigError, ReadOnlyStoreError, StoreError, StoreURLError
from tunecache.store import ACCEPTED_FORMS, Store, normalize_url, open_store, parse_store_url
from tunecache.testing.store_contract import HARDWARE, SUITE_WORKLOADS, rec

WK = SUITE_WORKLOADS[0]


# -- store locations, parsed once and strictly -------------------------------------------------

MALFORMED = {
    # what was written: what it silently became before
    "sqlite://lost.db": "an in-memory store: every record tuned into it was lost",
    "sqlite:rel.db": "a file named 'sqlite:rel.db'",
    "sqlite:/rel.db": "a folder named 'sqlite:'",
    "postgres//host/db": "a folder tree postgres/host/db",
    "sqlite:///": "an in-memory store",
    "sqlite://": "an in-memory store",
    ":memory:": "a file named ':memory:'",
    "sqlite:///x.db?mode=ro": "query parameters handed to the driver",
    "mysql://host/db": "an unknown scheme",
    "postgresql://": "a server chosen by libpq's defaults",
    "": "the current directory",
}


@pytest.mark.parametrize("url", list(MALFORMED), ids=[u or "empty" for u in MALFORMED])
def test_a_malformed_location_is_refused_and_nothing_is_created(url: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for opener in (parse_store_url, normalize_url, Store, open_store, lambda u: open_store(u, read_only=True)):
        with pytest.raises(StoreURLError) as info:
            opener(url)
        assert isinstance(info.value, ConfigError) and isinstance(info.value, StoreError)
        message = str(info.value)
        assert repr(url) in message and all(form in message for form in ACCEPTED_FORMS), message
    assert list(tmp_path.iterdir()) == []


def test_the_accepted_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    here = str(tmp_path)
    assert parse_store_url("memory").url == "sqlite://" and not parse_store_url("memory").persistent
    for given, path in (
        ("rel.db", f"{here}/rel.db"),
        ("./a:b.db", f"{here}/a:b.db"),  # a path with a colon, made explicit
        ("sub//x.db", f"{here}/sub/x.db"),
        ("sqlite:///rel.db", f"{here}/rel.db"),
        ("sqlite:////abs/dir/x.db", "/abs/dir/x.db"),
        (tmp_path / "p.db", f"{here}/p.db"),
    ):
        loc = parse_store_url(given)
        assert (loc.kind, str(loc.path), loc.url, loc.persistent) == ("sqlite", path, "sqlite:///" + path, True)
        assert parse_store_url(loc.url) == parse_store_url(path)  # the normalised URL parses to the same file
    for given in ("postgresql://me@db/tc", "postgresql+psycopg://me@db/tc", "postgres://me@db/tc"):
        loc = parse_store_url(given)
        assert (loc.kind, loc.url, loc.path) == ("postgresql", "postgresql+psycopg://me@db/tc", None)
    assert list(tmp_path.iterdir()) == []  # parsing touches nothing


def test_a_malformed_default_location_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNECACHE_DB", "sqlite://lost.db")
    with pytest.raises(StoreURLError, match=r"\$TUNECACHE_DB"):
        open_store()


def test_a_memory_store_says_it_is_not_kept(tmp_path: Path) -> None:
    assert not open_store("memory").persistent
    assert open_store(tmp_path / "kept.db").persistent
    Store(tmp_path / "team.db").close()
    assert not open_store(tmp_path / "team.db", overlay="memory").persistent  # new records go to memory
    assert open_store(tmp_path / "team.db", overlay=tmp_path / "mine.db").persistent


# -- commands that only read create nothing ----------------------------------------------------


@pytest.mark.parametrize("how", ["read_only", "create_false", "overlay_base"])
def test_reading_a_missing_store_raises_and_creates_nothing(how: str, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "store.db"
    with pytest.raises(StoreError, match=str(missing)) as info:
        if how == "read_only":
            open_store(missing, read_only=True)
        elif how == "create_false":
            open_store(missing, create=False)
        else:
            open_store(missing, overlay=tmp_path / "mine.db")
    assert not isinstance(info.value, StoreURLError)
    assert "does not exist" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # no folders, no empty store, no overlay either


def test_a_directory_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        open_store(tmp_path)


def test_writing_commands_still_create_the_store(tmp_path: Path) -> None:
    path = tmp_path / "new" / "store.db"
    with open_store(path) as st:
        st.commit_record(rec(WK, HARDWARE, 1e-3))
        assert not st.read_only and not st.immutable and st.read_only_reason == ""
    with open_store(path, create=False) as st:
        assert st.count_records() == 1 and not st.read_only


def test_read_only_on_ones_own_store_sees_concurrent_writes(tmp_path: Path) -> None:
    path = tmp_path / "mine.db"
    writer = Store(path)
    writer.commit_record(rec(WK, HARDWARE, 2e-3))
    reader = open_store(path, read_only=True)
    assert reader.read_only and not reader.immutable  # SQLite mode=ro: locks, change detection
    first = rec(WK, HARDWARE, 1e-3)
    writer.commit_record(first)
    assert reader.best_k(WK, HARDWARE, 1)[0].uid == first.uid
    with pytest.raises(ReadOnlyStoreError, match="overlay"):
        reader.commit_record(rec(WK, HARDWARE, 1e-4))


# -- read-only team stores, as an unprivileged user --------------------------------------------


def _unprivileged_prefix() -> list[str]:
    """Return the command prefix that runs a command as an unprivileged user; skip if none can."""
    if os.geteuid() != 0:
        return []
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root and there is no 'nobody' user to drop privileges to")
    candidates = []
    if shutil.which("setpriv"):
        candidates.append(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"])
    if shutil.which("runuser"):
        candidates.append(["runuser", "-u", "nobody", "--"])
    for prefix in candidates:
        # From a neutral directory: run from the checkout, ``-c`` would import tunecache from the
        # working directory even where ``nobody`` cannot read this interpreter's site-packages.
        probe = subprocess.run([*prefix, sys.executable, "-c", "import os, tunecache; print(os.geteuid())"],
                               capture_output=True, text=True, timeout=120, cwd="/")
        if probe.returncode == 0 and probe.stdout.strip() not in ("", "0"):
            return prefix
    pytest.skip("running as root and neither setpriv nor runuser could drop privileges to 'nobody' "
                "(or nobody cannot run this Python)")


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory everyone may traverse (pytest's tmp_path is 0700, closed to ``nobody``)."""
    d = Path(tempfile.mkdtemp(prefix="tunecache-access-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(d)


def _team_store(world: Path, n: int = 3) -> tuple[Path, list[str]]:
    """A team store with ``n`` records, in WAL mode and checkpointed, as its owner leaves it."""
    team = world / "team"
    team.mkdir()
    path = team / "tunecache.db"
    recs = [rec(WK, HARDWARE, (i + 1) * 1e-3) for i in range(n)]
    with Store(path) as st:
        st.commit_records(recs)
    assert not Path(f"{path}-wal").exists()  # the last connection checkpointed and removed it
    return path, [r.uid for r in recs]


def _lock(path: Path) -> None:
    path.chmod(0o444)
    path.parent.chmod(0o555)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


PROBE = textwrap.dedent(
    """
    import json, sys
    from tunecache.errors import ReadOnlyStoreError
    from tunecache.store import Store, open_store
    from tunecache.testing.store_contract import HARDWARE, SUITE_WORKLOADS, rec

    path, overlay = sys.argv[1], sys.argv[2]
    wk, out = SUITE_WORKLOADS[0], {}
    for asked in (False, True):
        st = Store(path, read_only=asked)
        got = {"read_only": st.read_only, "immutable": st.immutable, "reason": st.read_only_reason,
               "best": [r.uid for r in st.best_k(wk, HARDWARE, 10)], "records": len(st.records()),
               "stats": st.stats().records, "count": st.count_records()}
        try:
            st.commit_record(rec(wk, HARDWARE, 1e-6))
            got["refused"] = ""
        except ReadOnlyStoreError as err:
            got["refused"] = str(err)
        out["asked" if asked else "detected"] = got
        st.close()
    ov = open_store(path, overlay=overlay)
    mine = rec(wk, HARDWARE, 1e-4)
    ov.commit_record(mine)
    out["overlay"] = {"mine": mine.uid, "best": [r.uid for r in ov.best_k(wk, HARDWARE, 10)],
                      "base_read_only": ov.base.read_only, "persistent": ov.persistent}
    ov.close()
    print(json.dumps(out))
    """
)


def _run_as_nobody(prefix: list[str], world: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = world / "home"
    home.mkdir(exist_ok=True)
    home.chmod(0o777)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
           "TUNECACHE_LIB_CACHE": str(home / "libs")}
    env.pop("TUNECACHE_DB", None)
    return subprocess.run([*prefix, sys.executable, *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=str(home))


def test_a_read_only_team_store_serves_reads_and_an_overlay_takes_new_records(world: Path) -> None:
    prefix = _unprivileged_prefix()
    path, uids = _team_store(world)
    _lock(path)
    before, listing = _digest(path), sorted(os.listdir(path.parent))
    probe = world / "probe.py"
    probe.write_text(PROBE)
    mine_dir = world / "mine"
    mine_dir.mkdir()
    mine_dir.chmod(0o777)
    proc = _run_as_nobody(prefix, world, str(probe), str(path), str(mine_dir / "mine.db"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for how in ("detected", "asked"):  # not writable: read-only without being asked, and when asked
        got = out[how]
        assert got["read_only"] and got["immutable"], got  # no -wal: nothing to create in a 0555 directory
        assert got["best"] == uids and got["records"] == got["stats"] == got["count"] == len(uids)
        assert "read-only" in got["refused"] and "overlay" in got["refused"]
    assert "cannot write" in out["detected"]["reason"]
    ov = out["overlay"]
    assert ov["base_read_only"] and ov["persistent"] and ov["best"] == [ov["mine"], *uids]
    # The team store is untouched: same bytes, no -wal/-shm/-journal beside it.
    assert _digest(path) == before and sorted(os.listdir(path.parent)) == listing
    with Store(mine_dir / "mine.db", read_only=True) as mine:
        assert [r.uid for r in mine.records()] == [ov["mine"]]


def test_read_only_commands_work_on_a_read_only_team_store(world: Path) -> None:
    prefix = _unprivileged_prefix()
    path, uids = _team_store(world)
    _lock(path)
    before = _digest(path)
    for args in (["db", "stats", "--read-only", "--json"], ["db", "stats", "--json"], ["db", "ls", "--json"]):
        proc = _run_as_nobody(prefix, world, "-m", "tunecache.cli", *args, "--db", str(path))
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        out = json.loads(proc.stdout)
        if args[1] == "stats":
            assert out["records"] == len(uids)
        else:
            assert [r["uid"] for r in out] == uids
    assert _digest(path) == before and sorted(os.listdir(path.parent)) == ["tunecache.db"]


def test_a_reader_leaves_nothing_that_locks_the_owner_out(world: Path) -> None:
    """A team file (not the reader's) in a directory the reader may write: immutable, no files created.

    A ``mode=ro`` reader would create ``-wal``/``-shm`` owned by itself, and the file's owner
    would then fail every write ("attempt to write a readonly database").
    """
    prefix = _unprivileged_prefix()
    if not prefix:
        pytest.skip("needs root: the store must belong to another user than the reader")
    path, uids = _team_store(world)
    path.chmod(0o644)
    path.parent.chmod(0o777)
    probe = world / "probe.py"
    probe.write_text(PROBE)
    proc = _run_as_nobody(prefix, world, str(probe), str(path), str(world / "home" / "mine.db"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["detected"]["immutable"] and out["detected"]["best"] == uids
    assert sorted(os.listdir(path.parent)) == ["tunecache.db"]
    with Store(path) as owner:  # the owner still writes
        owner.commit_record(rec(WK, HARDWARE, 1e-5))
        assert owner.count_records() == len(uids) + 1


def test_uncheckpointed_changes_are_read_where_sqlite_can(world: Path) -> None:
    """A ``-wal`` with records in it: read with ``mode=ro`` (immutable would skip them)."""
    import sqlite3

    prefix = _unprivileged_prefix()
    path, uids = _team_store(world)
    extra = rec(WK, HARDWARE, 5e-4)
    writer = Store(path)
    writer.commit_record(extra)
    hold = sqlite3.connect(path)  # an open connection keeps the -wal and -shm
    hold.execute("PRAGMA wal_autocheckpoint=0")
    hold.execute("SELECT count(*) FROM tc_record").fetchall()
    writer.close()
    copy = world / "copy"
    copy.mkdir()
    for suffix in ("", "-wal", "-shm"):
        shutil.copy(f"{path}{suffix}", f"{copy / path.name}{suffix}")
    hold.close()
    target = copy / path.name
    assert Path(f"{target}-wal").stat().st_size > 0
    for p in copy.iterdir():
        p.chmod(0o444)
    copy.chmod(0o555)
    probe = world / "probe.py"
    probe.write_text(PROBE)
    proc = _run_as_nobody(prefix, world, str(probe), str(target), str(world / "home" / "mine2.db"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["detected"]["immutable"] and out["detected"]["best"] == [extra.uid, *uids]
    # Without the -shm (and no way to create it) SQLite cannot read the -wal: a clear error.
    copy.chmod(0o755)
    Path(f"{target}-shm").unlink()
    copy.chmod(0o555)
    proc = _run_as_nobody(prefix, world, "-c",
                          f"from tunecache.store import Store; Store({str(target)!r}, read_only=True)")
    assert proc.returncode != 0 and "checkpoint" in proc.stderr and "Traceback" in proc.stderr


@pytest.mark.tvm
def test_compile_from_a_read_only_team_store(world: Path) -> None:
    """``compile --tune never`` and ``compile --overlay`` against a 0444 store in a 0555 directory."""
    prefix = _unprivileged_prefix()
    from _models import relax_matmul_relu

    import tunecache

    team = world / "team"
    team.mkdir()
    path = team / "tunecache.db"
    with Store(path) as owner:  # closed: its last connection checkpoints and removes the -wal, as a team's would
        cm = tunecache.compile(relax_matmul_relu(16, 32, 16), store=owner, trials_per_task=2, seed=1,
                               progress=False, library_cache=False)
    tuned = cm.report.count("tuned")
    assert tuned >= 1
    _lock(path)
    before, listing = _digest(path), sorted(os.listdir(team))
    mine = world / "mine"
    mine.mkdir()
    mine.chmod(0o777)
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import tunecache
        from _models import relax_matmul_relu
        never = tunecache.compile(relax_matmul_relu(16, 32, 16), store={str(path)!r}, tune="never",
                                  progress=False, library_cache=False)
        over = tunecache.compile(relax_matmul_relu(16, 32, 16), store={str(path)!r}, overlay={str(mine / "m.db")!r},
                                 progress=False, library_cache=False)
        print(json.dumps({{"never": never.report.count("hit"), "never_trials": never.report.trials,
                           "overlay": over.report.count("hit"), "overlay_trials": over.report.trials}}))
        """
    )
    (world / "compile.py").write_text(script)
    proc = _run_as_nobody(prefix, world, str(world / "compile.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"never": tuned, "never_trials": 0, "overlay": tuned, "overlay_trials": 0}, out
    assert _digest(path) == before and sorted(os.listdir(team)) == listing
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
