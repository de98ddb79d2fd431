"""The unit of training data: one batch of (query, positive, hard negatives) examples and their collections.

Built by :class:`drmix.data.sampling.BatchBuilder` (or a recipe's own builder), consumed by the trainer and
by every :class:`~drmix.mixture.base.Strategy`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Batch:
    """One batch of training examples; each example knows which collection it came from."""

    queries: list[str]
    positives: list[str]
    negatives: list[list[str]]
    collection_ids: np.ndarray  # int64 [B], index into the trainer's collection list
    tokens: Any = None  # drmix.data.tokenized.BatchTokens: the stored ids of the same examples, when pre-tokenised

    def __len__(self) -> int:
        return len(self.queries)

    def slice(self, start: int, stop: int) -> "Batch":
        return Batch(self.queries[start:stop], self.positives[start:stop], self.negatives[start:stop],
                     self.collection_ids[start:stop],
                     None if self.tokens is None else self.tokens.slice(start, stop))
