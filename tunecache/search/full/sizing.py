"""Search sizing: MetaSchedule's evolutionary-search settings fitted to a trial or time budget.

MetaSchedule's defaults (population 512, 50 unmeasured seeds, 4 genetic iterations, 64 trials
per round) are sized for thousands of trials; with tens to a few hundred trials per task most of
that search is wasted on a 2-core machine (see ``shared/TVM_NOTES.md``). :func:`search_sizing`
sizes the search for a per-task trial budget, :func:`fit_to_time_budget` cuts the rounds so that
every task gets a first round within a time budget, and :func:`compact_search` makes the search
of such small rounds as cheap as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tunecache.errors import ConfigError

__all__ = [
    "COMPACT_BELOW_TRIALS_PER_ITER",
    "COMPACT_GENETIC_ITERS",
    "COMPACT_INIT_MIN_UNMEASURED",
    "COMPACT_POPULATION",
    "FIRST_PASS_SECONDS_PER_ROUND",
    "FIRST_PASS_SECONDS_PER_TRIAL",
    "FIRST_PASS_SHARE",
    "SearchSizing",
    "compact_search",
    "fit_to_time_budget",
    "search_sizing",
]


@dataclass(frozen=True)
class SearchSizing:
    """Evolutionary-search settings for one task and the batch size per scheduler round.

    Attributes mirror ``ms.search_strategy.EvolutionarySearch`` arguments, plus
    ``num_trials_per_iter`` (candidates built and measured per round).
    """

    population_size: int
    init_min_unmeasured: int
    genetic_num_iters: int
    num_trials_per_iter: int
    init_measured_ratio: float = 0.2
    max_fail_count: int = 5
    genetic_mutate_prob: float = 0.85
    genetic_max_fail_count: int = 10
    eps_greedy: float = 0.05


def search_sizing(trials_per_task: int) -> SearchSizing:
    """Choose evolutionary-search settings for a per-task trial budget.

    The rule: at most 64 trials per round and at least two rounds per task (so the cost model is
    trained on measurements at least once before the last round), never fewer than 8 trials per
    round; a small population for budgets up to 128 trials (population 64, 16 unmeasured seeds,
    2 genetic iterations: measured here to cost a fraction of MetaSchedule's defaults per trial
    with no loss at these budgets), a middle size up to 512, MetaSchedule's defaults above.

    Parameters
    ----------
    trials_per_task
        Measured candidates the task may get (>= 1).

    Returns
    -------
    SearchSizing

    Raises
    ------
    ConfigError
        If ``trials_per_task`` is less than 1.

    Examples
    --------
    >>> search_sizing(64).num_trials_per_iter
    32
    >>> search_sizing(64).population_size
    64
    """
    if trials_per_task < 1:
        raise ConfigError(f"trials_per_task must be >= 1, got {trials_per_task!r}")
    per_iter = min(64, max(8, math.ceil(trials_per_task / 2)))
    per_iter = min(per_iter, trials_per_task)
    if trials_per_task <= 128:
        return SearchSizing(64, 16, 2, per_iter)
    if trials_per_task <= 512:
        return SearchSizing(256, 32, 3, per_iter)
    return SearchSizing(512, 50, 4, per_iter)


#: Rough cost of one measured trial and of one round's candidate generation on a small CPU
#: (TVM_NOTES: 0.3-1.5 s a trial here), used only to fit a time budget's first pass.
FIRST_PASS_SECONDS_PER_TRIAL = 0.5
FIRST_PASS_SECONDS_PER_ROUND = 1.5
#: Share of a time budget the first pass (one round of every task) may take.
FIRST_PASS_SHARE = 0.5


def fit_to_time_budget(sizing: SearchSizing, n_tasks: int, time_budget_s: float | None) -> SearchSizing:
    """Shrink the round size so that one round of every task fits in part of a time budget.

    Every task's first round comes before any second round (the scheduler picks fresh tasks
    first), but a round of ``num_trials_per_iter`` candidates for each of many tasks can outlast
    a short budget, and a task never measured falls back to TVM's default schedule (often 10-50x
    slower). So the round size is cut until ``n_tasks`` rounds are estimated to take at most
    :data:`FIRST_PASS_SHARE` of the budget (never below one candidate).

    Parameters
    ----------
    sizing
        The search settings for the trial budget (:func:`search_sizing`).
    n_tasks
        Tasks that share the budget (each gets a first round).
    time_budget_s
        The wall-clock budget in seconds; ``None`` for none.

    Returns
    -------
    SearchSizing
        ``sizing`` with ``num_trials_per_iter`` cut to fit (only that field changes);
        ``sizing`` itself without a budget or tasks.

    Examples
    --------
    >>> fit_to_time_budget(search_sizing(64), 22, 240.0).num_trials_per_iter
    7
    >>> fit_to_time_budget(search_sizing(64), 2, 240.0).num_trials_per_iter
    32
    """
    if time_budget_s is None or n_tasks < 1:
        return sizing
    allowed = FIRST_PASS_SHARE * time_budget_s / n_tasks - FIRST_PASS_SECONDS_PER_ROUND
    per_iter = max(1, min(sizing.num_trials_per_iter, int(allowed // FIRST_PASS_SECONDS_PER_TRIAL)))
    return replace(sizing, num_trials_per_iter=per_iter)


#: The evolutionary search of a round cut to fit a time budget, in tunecache's engine: a
#: population of 32 evolved once. One search costs about the same whatever the round's size
#: (a resnet18 conv here: 2.4 s at population 64 with 2 genetic iterations, 0.75 s at 32 with
#: one), so with rounds of a few candidates the default spent most of a budget generating them.
COMPACT_POPULATION = 32
COMPACT_INIT_MIN_UNMEASURED = 8
COMPACT_GENETIC_ITERS = 1
#: Rounds of fewer candidates than this get the compact search.
COMPACT_BELOW_TRIALS_PER_ITER = 8


def compact_search(sizing: SearchSizing) -> SearchSizing:
    """The search of ``sizing`` made as cheap as its rounds are small.

    Parameters
    ----------
    sizing
        Settings whose round size may have been cut (:func:`fit_to_time_budget`).

    Returns
    -------
    SearchSizing
        ``sizing`` itself for rounds of :data:`COMPACT_BELOW_TRIALS_PER_ITER` candidates or more;
        else the same round size with at most the compact population, unmeasured seeds and
        genetic iterations.

    Examples
    --------
    >>> compact_search(fit_to_time_budget(search_sizing(64), 23, 180.0)).population_size
    32
    >>> compact_search(search_sizing(64)) == search_sizing(64)
    True
    """
    if sizing.num_trials_per_iter >= COMPACT_BELOW_TRIALS_PER_ITER:
        return sizing
    return replace(
        sizing,
        population_size=min(sizing.population_size, COMPACT_POPULATION),
        init_min_unmeasured=min(sizing.init_min_unmeasured, COMPACT_INIT_MIN_UNMEASURED),
        genetic_num_iters=min(sizing.genetic_num_iters, COMPACT_GENETIC_ITERS),
    )

