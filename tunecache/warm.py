"""``tunecache.warm``: tune a whole model zoo into the store ahead of time.

Tasks of every model are deduplicated by workload key (weights summed), store hits skipped, one
global reuse plan is made (with bridges), and the plan is executed locally or on a Ray cluster.
Interrupt it and run it again: committed work is kept and the rest continues.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tunecache.errors import ConfigError
from tunecache.report import format_seconds

__all__ = ["WarmReport", "warm", "load_zoo_file"]


@dataclass(frozen=True)
class WarmReport:
    """The outcome of a warm: per plan node, plus the plan and totals."""

    outcomes: tuple[Any, ...]
    plan_text: str
    plan_json: str
    hits: tuple[str, ...]
    seconds: float
    scratch_trials: float
    estimated_trials: float
    dry_run: bool = False
    timeline: tuple[tuple[float, int], ...] = field(default=())

    @property
    def trials(self) -> int:
        """Return the trials spent."""
        return sum(o.trials for o in self.outcomes)

    def count(self, outcome: str) -> int:
        """Return how many plan nodes had ``outcome``."""
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    def summary(self) -> str:
        """Return a one-line summary."""
        if self.dry_run:
            return (f"dry run: {len(json.loads(self.plan_json)['nodes'])} steps to search, {len(self.hits)} store hits; "
                    f"{self.estimated_trials:.0f} trials estimated vs {self.scratch_trials:.0f} from scratch")
        return (f"{len(self.outcomes)} steps: {self.count('tuned')} tuned, {self.count('reused')} reused, "
                f"{self.count('hit')} already done, {self.count('fallback')} not done; {len(self.hits)} store hits; "
                f"{self.trials} trials in {format_seconds(self.seconds)} (from scratch: {self.scratch_trials:.0f} trials)")

    def __str__(self) -> str:
        rows = [["node", "outcome", "trials", "time", "latency_ms", "note"]]
        for o in self.outcomes:
            rows.append([o.name[:56], o.outcome + (" (escalated)" if o.escalated else ""), str(o.trials),
                         format_seconds(o.seconds) if o.seconds else "-",
                         f"{o.latency_s * 1e3:.4f}" if o.latency_s else "-", o.note[:60]])
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * x for x in w))
        return "\n".join(lines + ["", self.summary()])

    def to_json(self) -> str:
        """Return the report as JSON."""
        return json.dumps({
            "summary": self.summary(),
            "trials": self.trials, "seconds": self.seconds, "scratch_trials": self.scratch_trials,
            "estimated_trials": self.estimated_trials, "hits": list(self.hits),
            "steps": [{"node": o.node, "name": o.name, "workload": str(o.key), "outcome": o.outcome, "trials": o.trials,
                       "seconds": o.seconds, "source": o.source, "escalated": o.escalated, "latency_s": o.latency_s,
                       "note": o.note} for o in self.outcomes],
            "plan": json.loads(self.plan_json),
        }, indent=2)

    def plot(self, path: str | Path) -> Path | None:
        """Write a PNG of trials spent over time against tuning every task from scratch."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(6, 3.5))
        xs = [0.0] + [t for t, _ in self.timeline]
        ys = [0] + [n for _, n in self.timeline]
        ax.step(xs, ys, where="post", label="tunecache (plan + reuse)")
        ax.axhline(self.scratch_trials, color="gray", linestyle="--", label="every task from scratch")
        ax.axhline(self.estimated_trials, color="tab:orange", linestyle=":", label="plan estimate")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("trials")
        ax.set_title(f"warm: {self.trials} trials vs {self.scratch_trials:.0f} from scratch")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        p = Path(path)
        fig.savefig(p, dpi=100)
        plt.close(fig)
        return p


def load_zoo_file(path: str | Path) -> tuple[list[str], list[Any]]:
    """Read a zoo TOML file; return (model specs, targets).

    Format::

        targets = ["llvm"]                 # optional; default: the host CPU
        [[model]]
        name = "bert_base"                 # a zoo name, with parameters:
        seq_len = 64
        [[model]]
        onnx = "models/foo.onnx"           # or an ONNX file (relative to the TOML file)
        [[model]]
        factory = "my_models.py:build"     # or a Python factory
    """
    import tomllib

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read zoo file {p}: {err}") from err
    specs = []
    for i, m in enumerate(data.get("model", [])):
        if not isinstance(m, dict):
            raise ConfigError(f"{p}: model entry {i + 1} is not a table")
        if "name" in m:
            params = ",".join(f"{k}={v}" for k, v in m.items() if k != "name")
            specs.append(m["name"] + (":" + params if params else ""))
        elif "onnx" in m:
            specs.append(str((p.parent / m["onnx"]).resolve()))
        elif "factory" in m:
            f, _, fn = str(m["factory"]).rpartition(":")
            specs.append(str((p.parent / f).resolve()) + ":" + fn)
        else:
            raise ConfigError(f"{p}: model entry {i + 1} needs one of name, onnx, factory")
    if not specs:
        raise ConfigError(f"{p} lists no [[model]] entries")
    targets = data.get("targets", [None])
    return specs, list(targets) if isinstance(targets, list) else [targets]


def warm(
    models: Sequence[str],
    target: Any = None,
    *,
    store: Any = None,
    full_trials: int = 64,
    reuse_trials: int = 16,
    time_budget_s: float | None = None,
    executor: str = "local",
    address: str | None = None,
    runner: str | None = None,
    bridges: bool = True,
    dry_run: bool = False,
    seed: int | None = None,
    progress: bool = True,
    holder: str | None = None,
) -> WarmReport:
    """Warm the store for ``models`` on ``target``.

    Parameters
    ----------
    models
        Model specs: zoo names (``"bert_base:seq_len=64"``), ``.onnx`` paths, ``file.py:factory``.
    target
        As in :func:`tunecache.compile` (default: the host CPU).
    store
        Store URL, path or object (default ``$TUNECACHE_DB`` / the user cache file).
    full_trials, reuse_trials
        Budgets of a full search and of a narrowed reuse search.
    time_budget_s
        Wall-clock budget of the whole warm.
    executor
        ``"local"`` or ``"ray"`` (``address``: ``"auto"`` joins a running cluster; ``None``
        starts a local one).
    runner
        ``rpc://HOST:PORT/KEY`` to measure through a TVM RPC tracker.
    bridges
        Plan with bridge operators.
    dry_run
        Plan only: nothing is measured.
    """
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor={executor!r}: use 'local' or 'ray'")
    from tunecache.cli.plan import collect_tasks, make_plan
    from tunecache.tvm_layer.bridges import materialize_bridge
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    t0 = time.time()
    tgt = resolve_target(target)
    hw = hardware_key(tgt)
    st = open_store(store)
    tasks = collect_tasks(list(models), tgt)
    done = [t for t in tasks if st.is_done(t.key, hw)]
    done_keys = {t.key for t in done}
    mp = make_plan([t for t in tasks if t.key not in done_keys], tgt, hw, _DoneView(st, done_keys),
                   bridges=bridges, full_trials=full_trials)
    hits = tuple(list(mp.hits) + [t.name for t in done])
    common = dict(plan_text=mp.to_text(), plan_json=mp.to_json(), hits=hits,
                  scratch_trials=float(mp.plan.scratch_trials), estimated_trials=mp.plan.total_trials)
    if dry_run:
        return WarmReport(outcomes=(), seconds=time.time() - t0, dry_run=True, **common)
    mods = {t.node: next(x.mod for x in tasks if x.key == t.key) for t in mp.tasks.values()}
    mods.update({n: materialize_bridge(nest, nest.extents) for n, nest in mp.bridges.items()})
    timeline: list[tuple[float, int]] = []
    spent = [0]
    n_steps = len(mp.plan.steps)

    def on_step(o: Any) -> None:
        spent[0] += o.trials
        timeline.append((time.time() - t0, spent[0]))
        if progress:
            el = time.time() - t0
            frac = min(1.0, spent[0] / max(1.0, mp.plan.total_trials))
            eta = format_seconds(el * (1 - frac) / frac) if frac > 0 else "?"
            print(f"[warm] {len(timeline)}/{n_steps} steps ({o.outcome}: {o.name[:40]}), {spent[0]} trials, "
                  f"{format_seconds(el)} elapsed, ~{eta} left", file=sys.stderr, flush=True)

    rpc_runner = _rpc_runner(runner) if runner else None
    if executor == "ray":
        from tunecache.search.ray_executor import execute_plan_ray

        outcomes = execute_plan_ray(mp, mods, tgt, st, hw, full_trials=full_trials, reuse_trials=reuse_trials,
                                    address=address, seed=seed, on_step=on_step, time_budget_s=time_budget_s,
                                    runner=runner)
    else:
        from tunecache.search.execute import execute_plan

        outcomes = execute_plan(mp, mods, tgt, st, hw, full_trials=full_trials, reuse_trials=reuse_trials,
                                time_budget_s=time_budget_s, seed=seed, holder=holder, on_step=on_step,
                                runner=rpc_runner)
    ordered = tuple(outcomes[s.node] for s in mp.plan.steps if s.node in outcomes)
    return WarmReport(outcomes=ordered, seconds=time.time() - t0, timeline=tuple(timeline), **common)


class _DoneView:
    """The store as the planner should see it during a warm: 'done' tasks count as hits."""

    def __init__(self, store: Any, done: set[Any]) -> None:
        self._s, self._done = store, done

    def best_k(self, key: Any, hw: Any, k: int = 1) -> list[Any]:
        # A task with records but no done mark was interrupted: plan it again (resume).
        return self._s.best_k(key, hw, k) if key in self._done else []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s, name)


def _rpc_runner(url: str) -> Any:
    """Build MetaSchedule's RPC runner from ``rpc://HOST:PORT/KEY``.

    Each candidate gets its own session: the builder's ``.tar`` is uploaded, linked into a
    shared library by the server (its ``load_module`` untars and links, so the server's machine
    needs a C compiler), run, and removed. A tracker that cannot be reached or has no server
    under KEY is a :class:`ConfigError` here, not a hang later.
    """
    import socket
    from urllib.parse import urlparse

    from tunecache.tvm_layer import load_tvm

    u = urlparse(url)
    if u.scheme != "rpc" or not u.hostname or not u.port or not u.path.strip("/"):
        raise ConfigError(f"--runner {url!r}: expected rpc://HOST:PORT/KEY (a TVM RPC tracker and device key)")
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    key = u.path.strip("/")
    # One session per candidate; the server kills a session that lasts longer than this.
    cfg = ms.runner.RPCConfig(tracker_host=u.hostname, tracker_port=u.port, tracker_key=key, session_timeout_sec=120)
    # Without a server registered under the key, the tracker queues every request forever: check first.
    probe = ms.runner.RPCConfig(tracker_host=u.hostname, tracker_port=u.port, tracker_key=key, session_timeout_sec=10)
    try:
        socket.create_connection((u.hostname, u.port), timeout=5).close()
        servers = probe.count_num_servers(allow_missing=True)
    except (ValueError, OSError, RuntimeError) as err:
        raise ConfigError(f"--runner {url}: cannot reach the TVM RPC tracker at {u.hostname}:{u.port} ({err}); start "
                          f"one with `python -m tvm.exec.rpc_tracker --host {u.hostname} --port {u.port}`") from err
    if servers == 0:
        raise ConfigError(f"--runner {url}: the tracker at {u.hostname}:{u.port} has no RPC server with key {key!r}; "
                          f"start one on the device with `python -m tvm.exec.rpc_server --tracker "
                          f"{u.hostname}:{u.port} --key {key}`")
    # One worker (session) per registered server, so several devices measure a batch in parallel.
    return ms.runner.RPCRunner(cfg, evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=0),
                               max_workers=servers)
