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

**No duplicates** (``no_duplicates=True``; the config's ``batch_sampler: no_duplicates``, after
sentence-transformers' ``BatchSamplers.NO_DUPLICATES``): a row
shares no text (query, positive or negative; compared by hash, :meth:`BatchBuilder.row_keys`) with a row
already in the batch. A row that would is set aside and tried first for the next batches of its collection
(the set-aside rows are part of the state, so resuming stays exact); when a collection cannot fill a batch
with distinct rows after looking through all of its rows, the batch is filled with set-aside rows and a
warning is logged once. Rows drawn this way are still drawn once per epoch, except set-aside rows, which may
be drawn again when their collection's next epoch reaches them first.

Hand-written: no library samples task-homogeneous batches over a weighted mixture with exact resume.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from drmix.data.batch import Batch, BatchKeys, ids_key, text_key
from drmix.data.pages import PageReleaser

log = logging.getLogger(__name__)

#: ``row_keys(collection, rows) -> one set of text hashes per row`` (the no-duplicates sampler's view of rows)
RowKeys = Callable[[int, list[int]], list[frozenset]]


@runtime_checkable
class RowBuilder(Protocol):
    """What the trainer asks of an objective's batch builder (:meth:`drmix.train.objective.Objective.builder`):
    :class:`BatchBuilder` for the fine-tuning objectives, :class:`drmix.pretrain.coco.SpanBuilder` for COCO."""

    #: the batches carry :class:`~drmix.data.batch.BatchKeys` (the loss's duplicate mask)
    keys: bool
    #: the batches carry teacher scores (distillation)
    scores: bool
    #: the no-duplicates sampler's view of rows, or None where the builder has none
    row_keys: RowKeys | None

    def build(self, pairs: list[tuple[int, int]]) -> Batch:
        """The batch of ``(collection, row)`` pairs."""

    def state_dict(self) -> dict[str, Any]:
        """The random state (part of every checkpoint)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""


class MixtureSampler:
    """Draws global batches of ``(collection_index, row_index)`` pairs."""

    def __init__(self, sizes: list[int], batch_size: int, *, mode: Literal["homogeneous", "mixed"] = "homogeneous",
                 seed: int = 0, no_duplicates: bool = False, row_keys: RowKeys | None = None) -> None:
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
        #: no-duplicates sampling: the rows' text hashes (set by the trainer from its batch builder)
        self.no_duplicates = no_duplicates
        self.row_keys = row_keys
        self.deferred: list[list[int]] = [[] for _ in sizes]
        self._warned: set[int] = set()

    def replica(self) -> "MixtureSampler":
        """A sampler with the same settings, permutation cache and key function (for replaying a draw)."""
        clone = MixtureSampler(self.sizes, self.batch_size, mode=self.mode, seed=self.seed,
                               no_duplicates=self.no_duplicates, row_keys=self.row_keys)
        clone._perm_cache = dict(self._perm_cache)
        clone._warned = self._warned
        return clone

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

    def take_distinct(self, c: int, n: int, seen: set) -> list[int]:
        """Next ``n`` rows of collection ``c`` sharing no key with ``seen`` or each other (set-aside rows
        first, at most ``4 n`` of them looked at per batch); ``seen`` gains their keys. See the module
        docstring."""
        if self.row_keys is None:
            raise ValueError("no_duplicates needs row_keys")
        if n <= 0:
            return []
        rows: list[int] = []
        aside: list[int] = []

        def consider(candidates: list[int]) -> None:
            for r, keys in zip(candidates, self.row_keys(c, candidates)):
                if len(rows) < n and seen.isdisjoint(keys):
                    rows.append(r)
                    seen.update(keys)
                else:
                    aside.append(r)

        cap = 4 * n
        earlier, later = self.deferred[c][:cap], self.deferred[c][cap:]
        consider(earlier)
        looked = 0
        while len(rows) < n and looked < self.sizes[c]:
            chunk = self.take(c, min(max(n - len(rows), 8), self.sizes[c] - looked))
            looked += len(chunk)
            consider(chunk)
        if len(rows) < n:  # the collection has too few distinct rows left: fill with set-aside ones
            if c not in self._warned:
                self._warned.add(c)
                log.warning("no_duplicates: collection %d could not fill a batch of %d with rows sharing no text; "
                            "the batch holds duplicates (the loss masks them unless mask_duplicates is off)", c, n)
            while len(rows) < n:
                rows.append(aside.pop(0) if aside else self.take(c, 1)[0])
        self.deferred[c] = [*aside, *later]
        return rows

    # -- batches ----------------------------------------------------------------------------------
    def counts(self, weights: np.ndarray) -> np.ndarray:
        """Slots per collection for a mixed batch: systematic rounding of ``weights * batch_size``."""
        w = normalise_weights(weights)
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
        w = normalise_weights(weights)
        if len(w) != len(self.sizes):
            raise ValueError(f"got {len(w)} weights for {len(self.sizes)} collections")
        take = self.take
        if self.no_duplicates:
            seen: set = set()
            take = lambda c, n: self.take_distinct(c, n, seen)  # noqa: E731 - one batch's shared key set
        if self.mode == "homogeneous":
            c = int(self.rng.choice(len(w), p=w))
            return [(c, r) for r in take(c, self.batch_size)]
        pairs = [(c, r) for c, n in enumerate(self.counts(w)) for r in take(c, int(n))]
        order = self.rng.permutation(len(pairs))
        return [pairs[i] for i in order]

    def state_dict(self) -> dict[str, Any]:
        state = {"rng": self.rng.bit_generator.state, "cursors": list(self.cursors), "epochs": list(self.epochs),
                 "sizes": list(self.sizes), "mode": self.mode, "batch_size": self.batch_size, "seed": self.seed}
        if self.no_duplicates:
            state["deferred"] = [list(d) for d in self.deferred]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore the drawing state, keeping the permutation cache (keyed by epoch, so it stays valid)."""
        self.rng.bit_generator.state = state["rng"]
        self.cursors = list(state["cursors"])
        self.epochs = list(state["epochs"])
        self.deferred = [list(d) for d in state.get("deferred", [[] for _ in self.sizes])]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["sizes"]) != self.sizes:
            raise ValueError(f"checkpoint was made with collection sizes {state['sizes']}, data now has {self.sizes}")
        self.set_state(state)
        self._perm_cache.clear()


def sum_to_one(weights: np.ndarray) -> np.ndarray:
    """``weights / weights.sum()`` that also holds when the sum overflows (finite weights near 1.8e308): scaled
    by the largest weight first. Expects finite, non-negative weights, not all zero."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.max()
    return w / w.sum()


def normalise_weights(weights: np.ndarray) -> np.ndarray:
    """Mixture weights scaled to sum to 1 (:func:`sum_to_one`); ValueError unless finite, >= 0, not all 0."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError(f"mixture weights must be finite, non-negative and not all zero, got {w}")
    return sum_to_one(w)



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

    ``keys``: the batch carries :class:`~drmix.data.batch.BatchKeys` (hashes of the texts, or of the stored ids
    on the stored-ids path: texts that are equal after truncation count as equal there, as they embed alike),
    for the loss's duplicate mask. ``scores``: it carries the teacher scores of the chosen positive and
    negatives (the collections' ``positive_scores`` / ``negative_scores``; NaN where a row has none). Neither
    changes which examples are drawn.
    """

    def __init__(self, collections: list, num_negatives: int, *, seed: int = 0, release_every: int = 16,
                 tokens: list | None = None, keys: bool = False, scores: bool = False) -> None:
        self.collections = collections
        self.num_negatives = num_negatives
        self.rng = np.random.default_rng([seed, 104729])
        self.pages = PageReleaser([c.dataset for c in collections], every=release_every)
        if tokens is not None and (len(tokens) != len(collections) or any(t is None for t in tokens)):
            tokens = None
        self.tokens = tokens
        self.keys = keys
        self.scores = scores
        self._score_views: dict[int, Any] = {}
        self._key_views: dict[int, Any] = {}

    def row_keys(self, c: int, rows: list[int]) -> list[frozenset]:
        """Hashes of every text of rows ``rows`` of collection ``c`` (query, positives, negatives): what the
        no-duplicates sampler compares (always the texts, so both input paths draw the same rows)."""
        if not rows:
            return []
        coll = self.collections[c]
        view = self._key_views.get(c)
        if view is None:
            view = self._key_views[c] = coll.dataset.select_columns(["query", "positives", "negatives"])
        data = view[list(rows)]
        return [frozenset([text_key(coll.format_query(q)), *map(text_key, coll.format_documents(p)),
                           *map(text_key, coll.format_documents(n))])
                for q, p, n in zip(data["query"], data["positives"], data["negatives"])]

    def _teacher(self, pairs: list[tuple[int, int]], choices: list[tuple[int, list[int]]]
                 ) -> tuple[np.ndarray, list[list[float]]]:
        """Teacher scores of the chosen positive and negatives of each example (NaN where the row has none)."""
        by_coll: dict[int, list[int]] = {}
        for c, r in pairs:
            by_coll.setdefault(c, []).append(r)
        fetched: dict[tuple[int, int], tuple[list, list]] = {}
        for c, rows in by_coll.items():
            view = self._score_views.get(c)
            if view is None:
                view = self._score_views[c] = self.collections[c].dataset.select_columns(
                    ["positive_scores", "negative_scores"])
            uniq = sorted(set(rows))
            data = view[uniq]
            for i, r in enumerate(uniq):
                fetched[(c, r)] = (data["positive_scores"][i] or [], data["negative_scores"][i] or [])
        pos, negs = [], []
        for (c, r), (j, idx) in zip(pairs, choices):
            ps, ns = fetched[(c, r)]
            pos.append(float(ps[j]) if j < len(ps) else float("nan"))
            negs.append([float(ns[i]) if i < len(ns) else float("nan") for i in idx])
        return np.asarray(pos, dtype=np.float64), negs

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
        queries, positives, negatives, choices = [], [], [], []
        for c, r in pairs:
            ex = fetched[(c, r)]
            queries.append(self.collections[c].format_query(ex["query"]))
            pos = self.collections[c].format_documents(ex["positives"])
            negs = self.collections[c].format_documents(ex["negatives"])
            j, idx = self._choose(len(pos), len(negs))
            positives.append(pos[j])
            negatives.append([negs[i] for i in idx])
            choices.append((j, idx))
        batch = Batch(queries, positives, negatives, np.array([c for c, _ in pairs], dtype=np.int64))
        if self.keys:
            batch.keys = BatchKeys(np.array([text_key(q) for q in queries], dtype=np.int64),
                                   np.array([text_key(p) for p in positives], dtype=np.int64),
                                   [np.array([text_key(t) for t in n], dtype=np.int64) for n in negatives])
        if self.scores:
            batch.positive_scores, batch.negative_scores = self._teacher(pairs, choices)
        return batch

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
                    ex, coll = self.collections[c].dataset[r], self.collections[c]
                    queries.append(coll.format_query(ex["query"]))
                    positives.append(coll.format_document(ex["positives"][j]))
                    negatives.append([coll.format_document(ex["negatives"][i]) for i in idx])
                cache.update(queries=queries, positives=positives, negatives=negatives)
            return cache

        n = len(pairs)
        batch = Batch(LazyTexts(n, lambda: texts()["queries"]), LazyTexts(n, lambda: texts()["positives"]),
                      LazyTexts(n, lambda: texts()["negatives"]), np.array([c for c, _ in pairs], dtype=np.int64),
                      tokens=BatchTokens(q_ids, p_ids, n_ids, self.tokens[0].key))
        if self.keys:
            batch.keys = BatchKeys(np.array([ids_key(q) for q in q_ids], dtype=np.int64),
                                   np.array([ids_key(p) for p in p_ids], dtype=np.int64),
                                   [np.array([ids_key(t) for t in n], dtype=np.int64) for n in n_ids])
        if self.scores:
            batch.positive_scores, batch.negative_scores = self._teacher(
                pairs, [(j, idx) for _, _, j, idx in choices])
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
