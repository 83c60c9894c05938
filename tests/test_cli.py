"""The ``tunecache`` command line as a user meets it (issue 26): budgets and trial counts that
agree, progress during long work, Ctrl-C as an interruption, errors as one sentence, output
worth reading.

The checks that need no tuning run in this process (``main([...])``); the rest run the command
in a subprocess on ``small_cnn`` or the tiny models of ``_warm_models.py`` with a few trials.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tunecache.cli import main
from tunecache.config import DEFAULT_TRIALS_PER_TASK

HERE = Path(__file__).parent
MODELS = [f"{HERE / '_warm_models.py'}:model_a", f"{HERE / '_warm_models.py'}:model_b"]
TRIALS = 4
PROGRESS = re.compile(r"^\[(tuning|warm)\] .* (\d+)/(\d+) trials?, ([\d.]+)s elapsed")
THIRD_PARTY = ("FutureWarning", "LeafSpec", "[INFO]", "Fast mode", "Scope Saving", "Scope Loaded", "Traceback")


def _run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunecache.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


def _one_error_line(stderr: str) -> str:
    """The stderr of a failed command: nothing but one ``tunecache: error:`` line at the end."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("tunecache: error: "), stderr[-3000:]
    assert sum(line.startswith("tunecache: error") for line in lines) == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    return lines[-1]


def _progress_lines(stderr: str) -> list[tuple[int, int, float]]:
    """``(trials, total, elapsed seconds)`` of every progress line (logs: one line each)."""
    out = []
    for line in stderr.splitlines():
        m = PROGRESS.match(line)
        if m:
            out.append((int(m.group(2)), int(m.group(3)), float(m.group(4))))
    return out


# -- 1. budgets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "flag"), [
    (["warm", "small_cnn", "--budget", "0"], "--budget"),
    (["warm", "small_cnn", "--budget", "-1"], "--budget"),
    (["warm", "small_cnn", "--reuse-budget", "0"], "--reuse-budget"),
    (["compile", "small_cnn", "--trials-per-task", "0"], "--trials-per-task"),
    (["compile", "small_cnn", "--budget", "eight"], "--trials-per-task"),
    (["compile", "small_cnn", "--reuse-budget", "0"], "--reuse-budget"),
    (["plan", "small_cnn", "--budget", "0"], "--budget"),
    (["compile", "small_cnn", "--time-budget", "0"], "--time-budget"),
])
def test_budgets_below_one_are_refused_naming_the_flag(capfd, argv, flag) -> None:
    assert main(argv) == 2
    line = _one_error_line(capfd.readouterr().err)
    assert flag in line and "trials_per_task" not in line and "full_trials" not in line


@pytest.mark.parametrize(("argv", "code", "meant"), [
    (["complie", "small_cnn"], 2, "; did you mean 'compile'?"),
    (["db", "stat"], 2, "; did you mean 'stats'?"),
    (["compile", "small_cnn", "--tune-never"], 2, "; did you mean --tune?"),
    (["compile", "small_cnn", "--trails-per-task=3"], 2, "; did you mean --trials-per-task?"),
    (["compile", "small-cnn", "--db", "memory"], 1, "did you mean 'small_cnn'?"),
    (["compile", "small_cnn", "--xyz"], 2, None),  # nothing close: no guess
    (["compile", "bert_base:seq_len=abc", "--db", "memory"], 1, "seq_len takes a positive integer (default 128)"),
    (["compile", "small_cnn", "--tune", "sometimes"], 2, None),
])
def test_a_mistyped_command_flag_or_model_says_what_was_likely_meant(capfd, argv, code, meant) -> None:
    assert main(argv) == code
    line = _one_error_line(capfd.readouterr().err)
    assert (meant in line) if meant else ("did you mean" not in line), line


def test_an_unreachable_store_is_named_once_in_its_error(capfd) -> None:
    url = "postgresql://nobody@127.0.0.1:1/none"  # port 1: refused at once
    assert main(["db", "stats", "--db", url]) == 1
    line = _one_error_line(capfd.readouterr().err)
    assert line.count("127.0.0.1:1/none") == 1 and "cannot open store" in line, line


def test_one_default_budget_for_compile_plan_and_warm_shown_in_help(capfd) -> None:
    from tunecache.cli.main import build_parser

    parser = build_parser()
    for argv in (["compile", "m"], ["plan", "m"], ["warm", "m"]):
        assert parser.parse_args(argv).budget == DEFAULT_TRIALS_PER_TASK, argv
        assert main([argv[0], "--help"]) == 0
        assert f"(default: {DEFAULT_TRIALS_PER_TASK})" in capfd.readouterr().out, argv
    import tunecache

    assert tunecache.warm.__kwdefaults__["full_trials"] == DEFAULT_TRIALS_PER_TASK
    assert tunecache.compile.__kwdefaults__["trials_per_task"] == DEFAULT_TRIALS_PER_TASK


def test_python_budgets_of_the_wrong_type_are_sentences(tmp_path) -> None:
    import tunecache
    from tunecache.errors import ConfigError

    with pytest.raises(ConfigError, match="trials_per_task must be a whole number.*'8'"):
        tunecache.compile(object(), trials_per_task="8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="full_trials must be at least 1"):
        tunecache.warm(["small_cnn"], full_trials=0, store=str(tmp_path / "w.db"))
    with pytest.raises(ConfigError, match="time_budget_s must be positive"):
        tunecache.warm(["small_cnn"], time_budget_s=-1.0, store=str(tmp_path / "w.db"))


@pytest.mark.tvm
def test_warm_spends_no_more_than_its_dry_run_and_every_count_agrees(tmp_path, capfd) -> None:
    """warm small_cnn --budget 8: the dry run estimated 34 trials, the run spent 50, one task 24;
    its progress lines came all at once at the end; it wrote ./warm.png unasked."""
    db = tmp_path / "w.db"
    # The tuning run in its own process, as a user runs it; the dry run and the re-run in this one.
    assert main(["warm", "small_cnn", "--db", str(db), "--budget", str(TRIALS), "--dry-run", "--json"]) == 0
    plan = json.loads(capfd.readouterr().out)
    estimate, most = plan["estimated_trials"], plan["max_trials"]
    assert estimate == most <= 6 * TRIALS  # no reuse in small_cnn: the estimate is exact
    run = _run("warm", "small_cnn", "--db", str(db), "--budget", str(TRIALS), "--seed", "1", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    rep = json.loads(run.stdout)
    assert (rep["estimated_trials"], rep["max_trials"]) == (estimate, most)
    assert 0 < rep["trials"] <= most
    assert rep["trials"] == sum(s["trials"] for s in rep["steps"])
    assert all(s["trials"] <= TRIALS for s in rep["steps"]), rep["steps"]
    progress = _progress_lines(run.stderr)
    assert progress[-1][:2] == (rep["trials"], most), run.stderr[-3000:]
    assert f"{rep['trials']} of at most {most} trials" in rep["summary"]
    # Progress came while searching (elapsed grows line to line), not every line at the end.
    elapsed = [p[2] for p in progress]
    assert len(progress) >= 3 and elapsed == sorted(elapsed) and elapsed[-1] > elapsed[1], run.stderr[-3000:]
    assert not any(bad in run.stderr for bad in THIRD_PARTY), run.stderr[-3000:]
    assert f"store: {db}" in run.stderr
    assert not list(tmp_path.glob("*.png"))  # a plot only with --plot
    capfd.readouterr()
    assert main(["warm", "small_cnn", "--db", str(db), "--budget", str(TRIALS), "--plot", str(tmp_path / "p.png")]) == 0
    again = capfd.readouterr()
    assert "0 of at most 0 trials" in again.out and "no plot written" in again.err, again.out + again.err[-2000:]


def test_a_task_no_candidate_of_which_runs_is_reported_once_not_retried(tmp_path, capfd) -> None:
    """BERT's embedding gather never measures (the runner fills its indices at random, out of
    bounds): every warm searched it again and exited 5, "run the same command again", which could
    not help. It is reported as unmeasurable, not searched again, and sets no error code."""
    gather = tmp_path / "gather.py"
    gather.write_text(
        "def embedding():\n"
        "    from tunecache.tvm_layer import load_tvm\n"
        "    load_tvm()\n"
        "    from tvm import relax\n"
        "    bb = relax.BlockBuilder()\n"
        "    idx = relax.Var('idx', relax.TensorType((8,), 'int64'))\n"
        "    table = relax.Var('table', relax.TensorType((1000, 16), 'float32'))\n"
        "    with bb.function('main', [idx, table]):\n"
        "        with bb.dataflow():\n"
        "            out = bb.emit_output(relax.op.take(table, idx, axis=0))\n"
        "        bb.emit_func_output(out)\n"
        "    return bb.get()\n")
    db = tmp_path / "g.db"
    first = _run("warm", f"{gather}:embedding", "--db", str(db), "--budget", str(TRIALS), "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    rep = json.loads(first.stdout)
    (step,) = rep["steps"]
    assert step["outcome"] == "fallback" and step["trials"] > 0  # searched once, nothing ran
    assert rep["unmeasurable"] == [step["name"]] and rep["not_done"] == 0
    assert "cannot be measured here" in first.stderr and "run the same command again" not in first.stderr
    assert main(["warm", f"{gather}:embedding", "--db", str(db), "--budget", str(TRIALS), "--json"]) == 0
    rep = json.loads(capfd.readouterr().out)
    assert rep["steps"] == [] and rep["trials"] == 0 and rep["unmeasurable"] == [step["name"]]
    assert "1 unmeasurable" in rep["summary"]


# -- 2. one hardware identity --------------------------------------------------------------------


def test_an_unknown_cpu_is_an_error_before_anything_is_built(capfd) -> None:
    t0 = time.time()
    assert main(["compile", "small_cnn", "--db", "memory", "--target", "llvm -mcpu=nonexistent_cpu"]) == 1
    line = _one_error_line(capfd.readouterr().err)
    assert "--target" in line and "nonexistent_cpu" in line
    assert time.time() - t0 < 60  # nothing was imported or built


# -- 4. Ctrl-C ------------------------------------------------------------------------------------


def _interrupt(cmd: list[str], db: Path, tmp: Path) -> tuple[int, str]:
    """Run ``cmd``, press Ctrl-C (SIGINT to its process group, as a terminal does) once a record
    is committed; return the exit code and stderr."""
    from tunecache.store import Store

    tmp.mkdir(exist_ok=True)
    # As at a terminal: SIGINT handled by default, even when this test runs under a shell that
    # started it in the background (which ignores SIGINT in what it starts, and children inherit
    # that; tunecache then rightly leaves the signal alone, as under nohup).
    p = subprocess.Popen([sys.executable, "-m", "tunecache.cli", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env={**os.environ, "TMPDIR": str(tmp)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 600
    try:
        while time.time() < deadline and p.poll() is None:
            if db.exists() and Store(str(db)).count_records() > 0:
                break
            time.sleep(0.3)
        assert p.poll() is None, "finished before it could be interrupted"
        os.killpg(p.pid, signal.SIGINT)
        _out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return p.returncode, err


def _assert_interrupted(rc: int, err: str, tmp: Path) -> None:
    assert rc == 130, err[-3000:]
    assert "Segfault" not in err and "Traceback" not in err, err[-3000:]
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert re.fullmatch(r"tunecache: interrupted after \d+ trials?; \d+ records? kept; "
                        r"run the same command to resume", last), err[-3000:]
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(("tunecache-", "tc-build-"))]


@pytest.mark.tvm
def test_ctrl_c_during_warm_stops_cleanly_and_a_rerun_resumes(tmp_path, capfd) -> None:
    from tunecache.store import Store
    from tunecache.tvm_layer.target import hardware_key

    db = tmp_path / "w.db"
    cmd = ["warm", *MODELS, "--db", str(db), "--budget", str(TRIALS), "--seed", "3", "--no-bridges"]
    rc, err = _interrupt(cmd, db, tmp_path / "tmp")
    _assert_interrupted(rc, err, tmp_path / "tmp")
    kept = Store(str(db)).count_records()
    assert kept > 0
    capfd.readouterr()
    assert main([*cmd, "--json"]) == 0  # the re-run in this process (TVM loaded already)
    again = json.loads(capfd.readouterr().out)
    store, hw = Store(str(db)), hardware_key(None)
    per_task: dict[str, int] = {}
    for r in store.records():
        per_task[r.workload.shash] = per_task.get(r.workload.shash, 0) + 1
    assert len(per_task) == 3 and all(n <= TRIALS for n in per_task.values()), per_task
    assert store.count_records() == kept + again["trials"]  # resumed, nothing redone
    assert all(store.is_done(r.workload, hw) for r in store.records(valid_only=True))


@pytest.mark.tvm
def test_ctrl_c_during_compile_stops_cleanly(tmp_path) -> None:
    db = tmp_path / "c.db"
    rc, err = _interrupt(["compile", "small_cnn", "--db", str(db), "--trials-per-task", str(TRIALS)], db,
                         tmp_path / "tmp")
    _assert_interrupted(rc, err, tmp_path / "tmp")
    assert "MetaSchedule tuning failed" not in err


# -- 5. errors are sentences -------------------------------------------------------------------------


def test_a_model_factory_that_raises_is_one_line_naming_the_model(tmp_path, capfd) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def boom():\n    raise RuntimeError('weights file missing')\n")
    # One command in its own process (what a user runs); the others in this one, where TVM is
    # already loaded (each process spends ~5-8 s importing TVM on a 2-core CI machine).
    proc = _run("compile", f"{bad}:boom", "--db", str(tmp_path / "x.db"), timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [proc.stderr]
    for cmd in ("warm", "plan"):
        assert main([cmd, f"{bad}:boom", "--db", str(tmp_path / "x.db")]) == 1
        errors.append(capfd.readouterr().err)
    for err in errors:
        line = _one_error_line(err)
        assert f"{bad}:boom" in line and "weights file missing" in line, line
    assert main(["compile", f"{bad}:boom", "--db", "memory", "--debug"]) == 1
    assert "Traceback" in capfd.readouterr().err


def test_output_paths_are_checked_before_compiling(tmp_path, capfd) -> None:
    t0 = time.time()
    assert main(["compile", "small_cnn", "--db", "memory", "-o", str(tmp_path / "nodir" / "x.so")]) == 1
    assert "nodir" in _one_error_line(capfd.readouterr().err)
    assert main(["compile", "small_cnn", "--db", "memory", "-o", str(tmp_path / "x.zip")]) == 1
    assert ".so" in _one_error_line(capfd.readouterr().err)
    assert time.time() - t0 < 60  # no compile ran


def test_db_export_into_a_path_under_a_file(tmp_path, capfd) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["db", "export", str(f / "sub"), "--db", str(tmp_path / "s.db")]) == 1
    assert str(f) in _one_error_line(capfd.readouterr().err)


def test_ray_without_a_cluster_is_one_line_naming_the_address() -> None:
    pytest.importorskip("ray")
    import ray

    from tunecache.errors import ConfigError
    from tunecache.warming import ray_cluster

    if ray.is_initialized():
        pytest.skip("Ray is running in this process")
    try:
        with ray_cluster("auto"):
            pytest.skip("a Ray cluster is running on this machine")
    except ConfigError as err:
        assert "--address auto" in str(err) and "ray start --head" in str(err)


def test_unexpected_errors_end_in_one_line_and_debug_shows_the_traceback(capfd, monkeypatch) -> None:
    from tunecache.cli import plan

    def broken(a: object) -> int:
        raise ValueError("boom")

    monkeypatch.setattr(plan, "_cmd_plan", broken)  # registered when main() builds its parser
    for argv, traceback in ((["plan", "m"], False), (["plan", "m", "--debug"], True)):
        assert main(argv) == 1
        err = capfd.readouterr().err
        assert err.strip().splitlines()[-1].startswith("tunecache: error: unexpected ValueError: boom"), err
        assert ("Traceback" in err) == traceback


# -- 6. output worth reading ------------------------------------------------------------------------


def test_every_command_takes_quiet_verbose_and_debug() -> None:
    from tunecache.cli.main import build_parser

    parser = build_parser()
    for argv in (["compile", "m"], ["plan", "m"], ["warm", "m"], ["zoo", "list"], ["db", "stats"], ["db", "ls"],
                 ["db", "gc", "--keep-top", "1"], ["db", "export", "d"], ["db", "check"]):
        for flag in ("-q", "-v", "--debug"):
            a = parser.parse_args([*argv, flag])
            assert getattr(a, {"-q": "quiet", "-v": "verbose", "--debug": "debug"}[flag]) is True, (argv, flag)


def test_version_names_tunecache_tvm_and_the_store_schema(capfd) -> None:
    assert main(["--version"]) == 0
    out = capfd.readouterr().out
    assert re.fullmatch(r"tunecache \S+, TVM 0\.27\S*, store schema v\d+\n", out), out


def test_log_lines_say_tunecache_once(capfd) -> None:
    import logging

    from tunecache.cli.common import output_setup

    with output_setup(verbose=True, debug=False):
        logging.getLogger("tunecache").info("tunecache: cost model pre-trained on 0 records")
    assert capfd.readouterr().err == "tunecache: cost model pre-trained on 0 records\n"


def test_tables_fit_100_columns_and_never_cut_a_word(capfd) -> None:
    from tunecache.report import CompileReport, TaskReport, format_latency

    assert main(["zoo", "list"]) == 0
    out = capfd.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100 and "small_cnn" in out
    note = ("not in store (tune='never'): differs in target.num-cores (2 stored vs 4 queried) and in the "
            "host fingerprint's CPU model (AMD EPYC 7B13 stored vs Intel Xeon queried)")
    rep = CompileReport(tasks=(TaskReport("fused_conv2d_add_relu", "w", "conv2d", ((1, 3),), 1, "fallback", note=note),
                               TaskReport("t", "w", "other", (), 1, "hit", latency_s=1.5e-6)))
    text = str(rep)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert note in " ".join(text.replace("\n    ", " ").splitlines()), text  # whole, every word intact
    assert "0.0000" not in text and format_latency(1.5e-6) in text and "1.50 us" in text
    assert rep.summary().startswith("2 tasks:")
    assert CompileReport(tasks=rep.tasks[:1]).summary().startswith("1 task:")


def test_db_gc_dry_run_and_the_file_shrinks(tmp_path, capfd) -> None:
    from tunecache.store import HardwareKey, Provenance, Record, Store, WorkloadDesc, WorkloadKey

    db = tmp_path / "g.db"
    store = Store(str(db))
    hw = HardwareKey('{"kind":"llvm"}')
    for w in range(20):
        key = WorkloadKey(f"{w:010d}")
        store.commit_workload(key, WorkloadDesc(name=f"task{w}"))
        store.commit_records([Record(key, hw, [[["Pad", [], [i, "x" * 200], []]], []], run_secs=(1e-3 + i * 1e-6,),
                                     latency_s=1e-3 + i * 1e-6, provenance=Provenance(kind="tuned", trials=i))
                              for i in range(100)])
    store.close()
    size = db.stat().st_size
    assert main(["db", "gc", "--keep-top", "2", "--dry-run", "--db", str(db)]) == 0
    assert "would remove 1960 records" in capfd.readouterr().out
    assert Store(str(db)).count_records() == 2000
    assert main(["db", "gc", "--keep-top", "2", "--db", str(db)]) == 0
    assert "removed 1960 records" in capfd.readouterr().out
    assert Store(str(db)).count_records() == 40 and db.stat().st_size < size / 2
    assert main(["db", "ls", "--db", str(db), "--best"]) == 0
    out = capfd.readouterr().out
    assert "trial #" in out and "latency_ms" not in out and out.rstrip().endswith("20 records")


@pytest.mark.tvm
def test_compile_output_reads_well_and_agrees_with_itself(tmp_path, capfd) -> None:
    """One store, three compiles: tuning (JSON, a .tar), all hits (quiet; the library comes
    from the library cache: a .tar is still a tar), and db ls naming tasks as compile does."""
    db = tmp_path / "c.db"
    first = _run("compile", "small_cnn", "--db", str(db), "--trials-per-task", str(TRIALS), "--seed", "1",
                 "--json", "-o", str(tmp_path / "a.tar"))
    assert first.returncode == 0, first.stderr[-3000:]
    rep = json.loads(first.stdout)
    n_tasks = len(rep["tasks"])
    most = rep["budget"]["max_trials"]
    assert 0 < rep["trials"] <= most <= n_tasks * TRIALS
    assert all(t["trials"] <= TRIALS for t in rep["tasks"])
    assert f"{rep['trials']} of at most {most} trials" in rep["summary"]
    assert _progress_lines(first.stderr)[-1][:2] == (rep["trials"], most), first.stderr[-3000:]
    assert not any(bad in first.stderr for bad in THIRD_PARTY), first.stderr[-3000:]
    assert f"store: {db}" in first.stderr and tarfile.is_tarfile(tmp_path / "a.tar")
    assert "[tuning]" in first.stderr and "tasks:" in first.stderr  # progress on stderr, stdout only the report

    quiet = _run("compile", "small_cnn", "--db", str(db), "-q", "-o", str(tmp_path / "b.tar"))
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    (summary,) = quiet.stdout.splitlines()  # the summary, once; nothing on stderr
    assert summary.startswith(f"{n_tasks} tasks: {n_tasks - rep['counts']['fallback']} hit") and quiet.stderr == "", (
        quiet.stdout + quiet.stderr)
    assert tarfile.is_tarfile(tmp_path / "b.tar")
    # The last two in this process (TVM already loaded), the first ones as a user runs them.
    assert main(["compile", "small_cnn", "--db", str(db), "-q", "-o", str(tmp_path / "c.so")]) == 0
    assert (tmp_path / "c.so").read_bytes()[:4] == b"\x7fELF"
    capfd.readouterr()
    assert main(["db", "ls", "--db", str(db), "--best", "--json"]) == 0
    names = {r["name"] for r in json.loads(capfd.readouterr().out)}
    assert names == {t["name"] for t in rep["tasks"]}, (names, [t["name"] for t in rep["tasks"]])
    assert main(["compile", "nosuchmodel", "--db", "memory"]) == 1
    assert "small_cnn" in _one_error_line(capfd.readouterr().err)  # the error lists the zoo's models


def test_commands_that_only_read_a_named_store_do_not_create_it(tmp_path) -> None:
    """A mistyped ``--db`` given to ``compile --tune never`` or ``plan`` is an error naming the
    path (README: commands that only read a store never create one), not a new empty store."""
    for args in (("compile", "small_cnn", "--tune", "never"), ("plan", "small_cnn")):
        missing = tmp_path / f"{args[0]}-typo.db"
        proc = _run(*args, "--db", str(missing), "--no-library-cache" if args[0] == "compile" else "-q")
        assert proc.returncode == 1, (args, proc.stderr[-2000:])
        assert str(missing) in _one_error_line(proc.stderr)
        assert not missing.exists()


@pytest.mark.tvm
def test_compile_with_a_memory_store_says_nothing_will_be_kept(tmp_path) -> None:
    proc = _run("compile", "small_cnn", "--db", "memory", "--tune", "never", "--no-library-cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "store: in memory (nothing tuned now will be kept" in proc.stderr
    assert not any(bad in proc.stderr for bad in THIRD_PARTY), proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, proc.stdout
    assert "6 tasks: 0 hit, 6 predicted, 0 reused, 0 tuned (0 trials" in proc.stdout
