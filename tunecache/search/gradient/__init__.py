"""Gradient search (Felix's idea on MetaSchedule's CPU sketches): relaxed tile sizes, a
differentiable cost model trained from the store, descent, rounding, measurement.

:mod:`~tunecache.search.gradient.space` holds the relaxation and the features,
:mod:`~tunecache.search.gradient.model` the cost model and its JSON file format,
:mod:`~tunecache.search.gradient.search` the search loop.
"""

from tunecache.search.gradient.model import CostModel
from tunecache.search.gradient.search import GradientResult, gradient_search
from tunecache.search.gradient.space import FEATURE_VERSION, TiledSpace, tiled_space, tiled_spaces

__all__ = ["FEATURE_VERSION", "CostModel", "GradientResult", "TiledSpace", "gradient_search", "tiled_space",
           "tiled_spaces"]
