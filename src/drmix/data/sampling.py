"""Batch sampling over a mixture of collections.

* **homogeneous** batches: each *global* batch comes from one collection, drawn with the mixture
  weights; each process takes its slice, so in-batch and cross-device negatives share a task
  (the fine-tuning default of tDRO stage 0/2 and of most retriever training recipes).
* **mixed** batches: every batch holds examples of every collection with positive weight; the number
  of slots of collection *i* is ``w_i * B`` rounded by systematic sampling, so its expectation is
  exactly ``w_i * B`` and each count is ``floor`` or ``ceil`` of it (what DRO measurement needs).

Within a collection, rows are drawn without replacement from a per-epoch permutation seeded by
``(seed, collection, epoch)``; the sampler's state (generator state, cursors, epochs) is a small JSON
dictionary, so a resumed run draws exactly the batches the uninterrupted run would have drawn.
Hand-written: no library samples task-homogeneous batches over a weighted mixture with exact resume.
"""
from __future__ import annotations

from typing import Any, Literal

import numpy as np

from drmix.data.batch import Batch
from drmix.data.pages import PageReleaser


class MixtureSampler:
    """Draws global batches of ``(collection_index, row_index)`` pairs."""

    def __init__(self, sizes: list[int], batch_size: int, *, mode: Literal["homogeneous", "mixed"] = "homogeneous",
                 seed: int = 0) -> None:
        if any(s <= 0 for s in sizes):
            raise ValueError("every collection needs at least one example")
        self.sizes = list(sizes)
        self.batch_size = batch_size
        self.mode = mode
        self.seed = seed
        self.rng = np.random.default_rng([seed, 7919])
        self.cursors = [0] * len(sizes)
        self.epochs = [0] * len(sizes)
        self._perm_cache: dict[int, tuple[int, np.ndarray]] = {}

    # -- rows within one collection ---------------------------------------------------------------
    def _perm(self, c: int) -> np.ndarray:
        cached = self._perm_cache.get(c)
        if cached is None or cached[0] != self.epochs[c]:
            # int32 rows where they fit (4 bytes per row, half of ``permutation``'s int64); shuffling an
            # arange with the generator is what ``permutation(n)`` does, so the order is the same
            dtype = np.int32 if self.sizes[c] < 2**31 else np.int64
            perm = np.arange(self.sizes[c], dtype=dtype)
            np.random.default_rng([self.seed, c, self.epochs[c]]).shuffle(perm)
            self._perm_cache[c] = (self.epochs[c], perm)
        return self._perm_cache[c][1]

    def take(self, c: int, n: int) -> list[int]:
        """Next ``n`` rows of collection ``c`` (wrapping into a new epoch when exhausted)."""
        rows: list[int] = []
        while len(rows) < n:
            perm = self._perm(c)
            k = min(n - len(rows), self.sizes[c] - self.cursors[c])
            rows.extend(int(r) for r in perm[self.cursors[c]:self.cursors[c] + k])
            self.cursors[c] += k
            if self.cursors[c] >= self.sizes[c]:
                self.cursors[c] = 0
                self.epochs[c] += 1
        return rows

    # -- batches ----------------------------------------------------------------------------------
    def counts(self, weights: np.ndarray) -> np.ndarray:
        """Slots per collection for a mixed batch: systematic rounding of ``weights * batch_size``."""
        w = _normalise(weights)
        expected = w * self.batch_size
        base = np.floor(expected).astype(np.int64)
        frac = expected - base
        extra = int(round(frac.sum()))
        if extra > 0:
            cum = np.cumsum(frac)
            points = self.rng.random() + np.arange(extra)
            hits = np.searchsorted(cum, points, side="right")
            np.add.at(base, np.minimum(hits, len(w) - 1), 1)
        return base

    def next_indices(self, weights: np.ndarray) -> list[tuple[int, int]]:
        """The next global batch as ``(collection, row)`` pairs."""
        w = _normalise(weights)
        if len(w) != len(self.sizes):
            raise ValueError(f"got {len(w)} weights for {len(self.sizes)} collections")
        if self.mode == "homogeneous":
            c = int(self.rng.choice(len(w), p=w))
            return [(c, r) for r in self.take(c, self.batch_size)]
        pairs = [(c, r) for c, n in enumerate(self.counts(w)) for r in self.take(c, int(n))]
        order = self.rng.permutation(len(pairs))
        return [pairs[i] for i in order]

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "cursors": list(self.cursors), "epochs": list(self.epochs),
                "sizes": list(self.sizes), "mode": self.mode, "batch_size": self.batch_size, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["sizes"]) != self.sizes:
            raise ValueError(f"checkpoint was made with collection sizes {state['sizes']}, data now has {self.sizes}")
        self.rng.bit_generator.state = state["rng"]
        self.cursors = list(state["cursors"])
        self.epochs = list(state["epochs"])
        self._perm_cache.clear()


def _normalise(weights: np.ndarray) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"mixture weights must be finite, non-negative and not all zero, got {w}")
    return w / w.sum()


class BatchBuilder:
    """Turns ``(collection, row)`` pairs into a :class:`Batch` of texts (one positive, up to H negatives).

    Every ``release_every`` batches the memory-mapped Arrow pages the reads brought into the process are
    released (:mod:`drmix.data.pages`), so resident memory stays flat however large the collections.

    ``tokens`` (one :class:`~drmix.data.tokenized.TokenIds` per collection, all for one tokenizer and one
    pair of lengths): the batch also carries the stored ids of its queries, positives and negatives
    (:class:`~drmix.data.tokenized.BatchTokens`), and its texts are read from Arrow only if something asks
    for them (a strategy that encodes texts, a fallback). The random choices (which positive, which
    negatives) are made from the stored counts with the same generator calls, so both paths draw the same
    examples and leave the generator in the same state.
    """

    def __init__(self, collections: list, num_negatives: int, *, seed: int = 0, release_every: int = 16,
                 tokens: list | None = None) -> None:
        self.collections = collections
        self.num_negatives = num_negatives
        self.rng = np.random.default_rng([seed, 104729])
        self.pages = PageReleaser([c.dataset for c in collections], every=release_every)
        if tokens is not None and (len(tokens) != len(collections) or any(t is None for t in tokens)):
            tokens = None
        self.tokens = tokens

    def _choose(self, n_pos: int, n_neg: int) -> tuple[int, list[int]]:
        """Index of the positive and of the negatives of one example (the generator calls of both paths)."""
        j = int(self.rng.integers(n_pos)) if n_pos > 1 else 0
        if self.num_negatives and n_neg:
            k = min(self.num_negatives, n_neg)
            idx = self.rng.choice(n_neg, size=k, replace=False) if n_neg > k else range(k)
            return j, [int(i) for i in idx]
        return j, []

    def build(self, pairs: list[tuple[int, int]]) -> Batch:
        if self.tokens is not None:
            return self._build_tokens(pairs)
        by_coll: dict[int, list[int]] = {}
        for c, r in pairs:
            by_coll.setdefault(c, []).append(r)
        fetched: dict[tuple[int, int], dict] = {}
        for c, rows in by_coll.items():
            uniq = sorted(set(rows))
            data = self.collections[c].dataset[uniq]
            for i, r in enumerate(uniq):
                fetched[(c, r)] = {k: data[k][i] for k in ("query", "positives", "negatives")}
        self.pages.tick()
        queries, positives, negatives = [], [], []
        for c, r in pairs:
            ex = fetched[(c, r)]
            queries.append(self.collections[c].format_query(ex["query"]))
            pos = ex["positives"]
            negs = ex["negatives"] or []
            j, idx = self._choose(len(pos), len(negs))
            positives.append(pos[j])
            negatives.append([negs[i] for i in idx])
        return Batch(queries, positives, negatives, np.array([c for c, _ in pairs], dtype=np.int64))

    def _build_tokens(self, pairs: list[tuple[int, int]]) -> Batch:
        from drmix.data.tokenized import BatchTokens, LazyTexts

        q_ids, p_ids, n_ids, choices = [], [], [], []
        for c, r in pairs:
            t = self.tokens[c]
            j, idx = self._choose(t.positives.length(r), t.negatives.length(r))
            q_ids.append(t.query(r))
            p_ids.append(t.positives.item(r, j))
            n_ids.append([t.negatives.item(r, i) for i in idx])
            choices.append((c, r, j, idx))
        cache: dict[str, list] = {}

        def texts() -> dict[str, list]:  # read from Arrow only when asked for
            if not cache:
                queries, positives, negatives = [], [], []
                for c, r, j, idx in choices:
                    ex = self.collections[c].dataset[r]
                    queries.append(self.collections[c].format_query(ex["query"]))
                    positives.append(ex["positives"][j])
                    negatives.append([ex["negatives"][i] for i in idx])
                cache.update(queries=queries, positives=positives, negatives=negatives)
            return cache

        n = len(pairs)
        return Batch(LazyTexts(n, lambda: texts()["queries"]), LazyTexts(n, lambda: texts()["positives"]),
                     LazyTexts(n, lambda: texts()["negatives"]), np.array([c for c, _ in pairs], dtype=np.int64),
                     tokens=BatchTokens(q_ids, p_ids, n_ids, self.tokens[0].key))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
