"""Synthetic data for the book's experiments, deterministic given a seed; nothing is downloaded.

One module per task family; :class:`Vocab` is the shared token <-> id mapping.
"""

from .coreference import CorefExample, CorefSplit, CorefTask
from .long_range import LongRangeTask
from .lookup import LookupBatch, prev_first_lookup
from .order_tasks import IGNORE_INDEX, ShiftedCopyTask, shifted_copy_batch
from .recall import RecallBatch, key_value_recall
from .vocab import Vocab

__all__ = [
    "IGNORE_INDEX",
    "ShiftedCopyTask",
    "shifted_copy_batch",
    "CorefExample",
    "CorefSplit",
    "CorefTask",
    "LongRangeTask",
    "LookupBatch",
    "prev_first_lookup",
    "RecallBatch",
    "key_value_recall",
    "Vocab",
]
