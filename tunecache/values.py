"""The small frozen values the layers pass each other: task outcomes and the search context.

Keys and records live in :mod:`tunecache.store.keys` and :mod:`tunecache.store.records`; this
module imports neither TVM nor a store backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from tunecache.config import DEFAULT_SEARCH
from tunecache.store.keys import HardwareKey, WorkloadKey

__all__ = ["OUTCOMES", "Outcome", "SearchContext", "TaskOutcome", "DEFAULT_ESCALATE_BELOW"]

#: hit: served from the store; reused: narrowed search from a similar workload; tuned: full
#: search; fallback: compiled with TVM's default schedule (no record).
Outcome = Literal["hit", "replayed", "predicted", "reused", "tuned", "fallback"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

#: Escalate a reused program whose throughput is below this fraction of its source's.
DEFAULT_ESCALATE_BELOW = 0.7


@dataclass(frozen=True)
class TaskOutcome:
    """What the search did for one plan node (a task of the model, or a bridge operator).

    Attributes
    ----------
    node
        The plan node id.
    name
        Task name (the node id for a bridge).
    key
        The node's workload key.
    outcome
        ``tuned`` (full search), ``reused`` (narrowed search), ``hit`` (done in the store
        already) or ``fallback`` (no valid program).
    trials, seconds
        Measurements and wall time spent on the node.
    source
        For ``reused`` (and escalations): the workload whose program was the starting point.
    note
        How the node was searched, or why it fell back.
    escalated
        A reused program fell clearly short of its source and was searched in full.
    latency_s
        The best latency the store holds for the node after the search, if any.
    """

    node: str
    name: str
    key: WorkloadKey
    outcome: Outcome
    trials: int = 0
    seconds: float = 0.0
    source: str | None = None
    note: str = ""
    escalated: bool = False
    latency_s: float | None = None


@dataclass(frozen=True)
class SearchContext:
    """Everything a search of plan nodes needs besides the nodes: one value, not a parameter list.

    Attributes
    ----------
    target, hardware
        The ``tvm.target.Target`` searched for and the hardware key records are stored under.
    store
        Where every measurement is committed (a :class:`tunecache.store.BaseStore`).
    full_trials, reuse_trials
        Budgets of a full search (and of an escalation) and of a narrowed search.
    builder, runner
        MetaSchedule's builder and runner, shared by every search of the plan.
    work_dir
        MetaSchedule's logs and artifacts.
    escalate_below
        Escalate a reused program whose throughput is below this fraction of its source's.
    seed
        Search seed (``None``: random).
    deadline
        A ``time.time()`` after which no new search round starts (``None``: no limit).
    progress
        Receives :class:`tunecache.search.full.SearchProgress` events.
    cost_model
        The XGBoost model every full search of the plan uses and trains (``None``: a fresh one
        per search).
    holder, lease_s, wait_s
        Claim holder id, lease length, and how long to wait for another holder's claim.
    fresh
        Search every node again with its whole budget (``tune="always"``): done marks and
        records already spent do not count; the stored records still seed the search.
    search
        The full search's kind: ``"evolutionary"`` or ``"gradient"`` (:data:`tunecache.config.SEARCHES`).
    shared
        What the plan's searches compute once and share (the gradient search's start: the
        store's training rows and neighbours, and its cost model); ``dataclasses.replace`` keeps
        the same dict.
    """

    target: Any
    store: Any
    hardware: HardwareKey
    full_trials: int
    reuse_trials: int
    builder: Any
    runner: Any
    work_dir: Path
    escalate_below: float = DEFAULT_ESCALATE_BELOW
    seed: int | None = None
    deadline: float | None = None
    progress: Callable[[Any], None] | None = None
    cost_model: Any = None
    holder: str = ""
    lease_s: float = 60.0
    wait_s: float = 3600.0
    fresh: bool = False
    search: str = DEFAULT_SEARCH
    shared: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
