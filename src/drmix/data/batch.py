"""The unit of training data: one batch of (query, positive, hard negatives) examples and their collections.

Built by :class:`drmix.data.sampling.BatchBuilder` (or a recipe's own builder), consumed by the trainer and
by every :class:`~drmix.mixture.base.Strategy`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class BatchKeys:
    """Hashes of what a *global* batch's examples are made of: each query, the chosen positive and the chosen
    hard negatives (of the texts, or of the stored token ids when the batch is padded from them). Equal hashes
    mean equal model inputs; the duplicate mask of the loss (:func:`drmix.model.losses.false_negative_mask`)
    compares them. Every process holds the keys of the whole global batch (each draws it alike), so the mask
    needs no communication."""

    queries: np.ndarray            # int64 [G]
    positives: np.ndarray          # int64 [G]
    negatives: list[np.ndarray]    # per example, int64 [k_i]

    def padded_negatives(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """``([G, width] keys, [G, width] present)`` of the first ``width`` negatives of every example."""
        g = len(self.queries)
        keys = np.zeros((g, width), dtype=np.int64)
        present = np.zeros((g, width), dtype=bool)
        for i, n in enumerate(self.negatives):
            k = min(len(n), width)
            keys[i, :k] = n[:k]
            present[i, :k] = True
        return keys, present


def text_key(text: str) -> int:
    """The key of one text (Python's hash of the string: stable within a process, which is all a batch needs)."""
    return hash(text)


def ids_key(ids: Any) -> int:
    """The key of one stored token-id sequence."""
    return hash(np.asarray(ids).tobytes())


@dataclass
class Batch:
    """One batch of training examples; each example knows which collection it came from."""

    queries: list[str]
    positives: list[str]
    negatives: list[list[str]]
    collection_ids: np.ndarray  # int64 [B], index into the trainer's collection list
    tokens: Any = None  # drmix.data.tokenized.BatchTokens: the stored ids of the same examples, when pre-tokenised
    #: hashes of the global batch this batch is (a slice of), when the builder was asked for them
    keys: BatchKeys | None = None
    #: index of this batch's first example in the global batch that ``keys`` describe
    offset: int = 0
    #: teacher scores of each example's chosen positive ([B] float) and negatives (per example), when drawn
    positive_scores: np.ndarray | None = None
    negative_scores: list[list[float]] | None = None

    def __len__(self) -> int:
        return len(self.queries)

    def slice(self, start: int, stop: int) -> "Batch":
        return Batch(self.queries[start:stop], self.positives[start:stop], self.negatives[start:stop],
                     self.collection_ids[start:stop],
                     None if self.tokens is None else self.tokens.slice(start, stop),
                     keys=self.keys, offset=self.offset + start,
                     positive_scores=None if self.positive_scores is None else self.positive_scores[start:stop],
                     negative_scores=None if self.negative_scores is None else self.negative_scores[start:stop])
