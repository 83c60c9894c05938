"""What a plan may spend: every step's cap, the plan's total, and the time its full searches get.

The executor (:mod:`tunecache.search.execute`), a dry run (``tunecache warm --dry-run``,
``tunecache plan``) and the progress line all read these, so the numbers they show agree.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from tunecache.reuse.graph import ROOT
from tunecache.reuse.plan import Plan
from tunecache.reuse.planner import ModelPlan

__all__ = [
    "REUSE_SECONDS_PER_SEARCH",
    "REUSE_SECONDS_PER_TRIAL",
    "TOP_UP_MIN_S",
    "bounded_plan",
    "full_search_deadline",
    "plan_budget",
    "plan_estimate",
    "step_caps",
]

#: Rough cost of a narrowed search on a small CPU (operator sets: 12 trials in 3-5 s), used
#: only to keep part of a time budget for the reuse children while full searches run.
REUSE_SECONDS_PER_TRIAL = 0.4
REUSE_SECONDS_PER_SEARCH = 1.0
#: A time budget with at least this many seconds left once every step of a plan ran goes to one
#: more full search of the plan's tasks (:func:`top_up`).
TOP_UP_MIN_S = 10.0


def full_search_deadline(deadline: float | None, reuse_left: int, reuse_trials: int,
                         now: float | None = None) -> float | None:
    """Return when the full searches of a plan pass must stop so the reuse children still fit.

    Without it a time budget went to the roots' full searches, which use all the time they are
    given, and every task reused from them fell back to TVM's default schedule. The reserve is
    ``reuse_left`` narrowed searches at :data:`REUSE_SECONDS_PER_TRIAL` a trial plus
    :data:`REUSE_SECONDS_PER_SEARCH`; the full searches always keep at least half of the time
    left (their first pass measures every root once).

    Examples
    --------
    >>> full_search_deadline(1000.0, 10, 8, now=700.0)
    958.0
    >>> full_search_deadline(1000.0, 100, 8, now=700.0)  # reserve larger than half
    850.0
    >>> full_search_deadline(None, 10, 8) is None
    True
    """
    if deadline is None:
        return None
    now = time.time() if now is None else now
    reserve = reuse_left * (reuse_trials * REUSE_SECONDS_PER_TRIAL + REUSE_SECONDS_PER_SEARCH)
    return max(deadline - reserve, now + 0.5 * max(0.0, deadline - now))


def bounded_plan(mp: ModelPlan, full_trials: int, reuse_trials: int) -> ModelPlan:
    """``mp`` with every step's estimate cut to what executing it may spend.

    The planner estimates a narrowed search from the size of its neighbourhood (up to its cost
    model's ``max_reuse_trials``), but the executor stops one at ``reuse_trials``; and no step
    gets more than a full search's ``full_trials``. A dry run, the progress line and the
    report all read the cut plan (:func:`plan_estimate`, :func:`plan_budget`), so they agree.

    Examples
    --------
    >>> from tunecache.reuse.planning import Plan, PlanStep
    >>> p = Plan((PlanStep("a", ROOT, "root", "task", 8.0),
    ...           PlanStep("b", "a", "task", "task", 30.0)), scratch_trials=16)
    >>> [s.est_trials for s in bounded_plan(ModelPlan(p, {}), 8, 4).plan.steps]
    [8.0, 4.0]
    """
    steps = tuple(replace(s, est_trials=float(min(s.est_trials, full_trials if s.source == ROOT
                                                   else min(reuse_trials, full_trials))))
                  for s in mp.plan.steps)
    return replace(mp, plan=Plan(steps, scratch_trials=mp.plan.scratch_trials))


def plan_estimate(mp: ModelPlan) -> int:
    """The trials the planner expects ``mp`` to spend (no escalation): its steps' estimates, rounded up."""
    return math.ceil(mp.plan.total_trials - 1e-9)


def step_caps(mp: ModelPlan, full_trials: int) -> dict[str, int]:
    """The most trials each step of ``mp`` (a :func:`bounded_plan`) may spend.

    A full search its estimate (its budget, or the one program of a trivial task); a narrowed
    search ``full_trials``: an escalation to full search, or a time budget's top-up, may take
    the task up to a full search's budget.
    """
    return {s.node: math.ceil(s.est_trials - 1e-9) if s.source == ROOT else int(full_trials)
            for s in mp.plan.steps}


def plan_budget(mp: ModelPlan, full_trials: int) -> int:
    """The most trials executing ``mp`` (a :func:`bounded_plan`) spends: the sum of :func:`step_caps`.

    Equal to :func:`plan_estimate` for a plan without narrowed searches.
    """
    return sum(step_caps(mp, full_trials).values())
