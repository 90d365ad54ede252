"""Synthetic data for the book's experiments, deterministic given a seed; nothing is downloaded.

One module per task family; :class:`Vocab` is the shared token <-> id mapping.
"""
from .coreference import CorefExample, CorefSplit, CorefTask
from .long_range import LongRangeTask
from .vocab import Vocab

__all__ = ["CorefExample", "CorefSplit", "CorefTask", "LongRangeTask", "Vocab"]
