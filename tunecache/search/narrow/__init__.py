"""Narrowed reuse search: tune a task from the tuned programs of a similar one (ETO on MetaSchedule)."""

from tunecache.search.narrow.align import OPEN_TRIES, Skeleton, open_locations, open_picks
from tunecache.search.narrow.moves import PHASES, cpu_cost, fit_tiles, tile_moves
from tunecache.search.narrow.replay import as_ir_module, propose_neighbours, replay_on, sketch_on
from tunecache.search.narrow.search import IMPROVEMENT, NarrowedSearch, NarrowResult, RoundSummary, narrowed_search

__all__ = [
    "IMPROVEMENT",
    "OPEN_TRIES",
    "PHASES",
    "NarrowResult",
    "NarrowedSearch",
    "RoundSummary",
    "Skeleton",
    "as_ir_module",
    "cpu_cost",
    "fit_tiles",
    "narrowed_search",
    "open_locations",
    "open_picks",
    "propose_neighbours",
    "replay_on",
    "sketch_on",
    "tile_moves",
]
