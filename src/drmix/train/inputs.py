"""The training input pipeline: batches drawn, tokenised to tensors and pinned off the critical path.

Building a step's inputs (drawing rows, fetching their texts from Arrow, tokenising, padding, copying
to the GPU) used to run on the training thread between two steps while the GPU waited. Here:

* :class:`Featurizer` tokenises texts straight to padded int64 tensors in one pass, with the
  single-pass tokenisation of :class:`drmix.model.features.TextBatcher` (one fast-tokenizer call, a
  vectorised scatter into a numpy array; never transformers' per-element ``convert_to_tensors``).
  On CUDA widths are padded to a multiple of 8 (tensor cores; masked columns leave embeddings
  unchanged); on CPU the extra columns would only cost time, so the trainer pads to the longest text.
  The first batch is checked against ``model.preprocess`` (and everything falls back to it when the
  two differ), so every SentenceTransformer module still sees what it would see from ``encode``.
  Tensors are pinned when the target device is CUDA, so the copy can be asynchronous.
* :class:`InputPipeline` draws the next ``prefetch`` batches ahead and prepares them on background
  threads (``workers``; a fast tokenizer releases the GIL while it encodes, so a thread overlaps
  with the step's Python and the GPU's work). Threads rather than DataLoader worker processes: the
  collections are memory-mapped Arrow tables and the model's tokenizer is already loaded here, so a
  thread needs no pickling, no second copy and no start-up, and the draws stay in one process where
  the sampler's state lives.

Exactness. Drawing depends on the strategy's sampling weights, which may change after any step, so
a batch drawn ahead is *speculative*: it is drawn (on the training thread; cheap index arithmetic)
with the latest weights, from a recorded sampler/builder state. When it is consumed with weights
``w``: if ``w`` equals the weights it was drawn with, it is used; otherwise the draw is replayed from
the recorded state with ``w`` (index arithmetic only) and the batch is used only if the rows and the
sampler's state after it are identical, else every pending batch is dropped and the draw is redone
from the recorded state. So the pipeline yields exactly the batches of the synchronous loop, and its
:meth:`InputPipeline.state_dict` is the state *before the first unconsumed batch*, so a resumed run
draws exactly what the uninterrupted one would have.

Hand-written: the prefetch with speculation and rollback is specific to a sampler whose weights a
strategy moves during training; torch's DataLoader cannot redraw a batch it has already produced.
"""
from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.data.sampling import MixtureSampler, RowBuilder
from drmix.model.features import TextBatcher

log = logging.getLogger(__name__)
PAD_MULTIPLE = 8


class Featurizer:
    """Texts -> padded CPU tensors for one SentenceTransformer, safe to call from several threads.

    Each thread gets its own copy of the tokenizer (a fast tokenizer's truncation setting is shared
    mutable state). Call :meth:`verify` once on the main thread before using it from threads.
    """

    def __init__(self, model: Any, *, pin: bool = False, pad_multiple: int = PAD_MULTIPLE) -> None:
        self.model = model
        self.pin = pin
        self.pad_multiple = pad_multiple
        self._local = threading.local()
        self._fast: dict[int, bool] = {}  # max_length -> shortcut verified equal to model.preprocess
        self._extras: dict[int, dict[str, Any]] = {}
        self._ids_ok: dict[int, bool] = {}  # max_length -> stored ids checked equal to the tokenizer's
        self._fingerprint: str | None = None

    def _batcher(self, max_length: int, *, main: bool = False):
        cache = self._local.__dict__.setdefault("batchers", {})
        key = (max_length, main)
        if key not in cache:
            tok = getattr(self.model, "tokenizer", None)
            if not main and tok is not None:
                tok = copy.deepcopy(tok)
            b = TextBatcher(self.model, "", max_length, pad_multiple=self.pad_multiple, tokenizer=tok)
            if max_length in self._fast:
                b.fast = self._fast[max_length]
                b.extras = self._extras[max_length]
            cache[key] = b
        return cache[key]

    @property
    def threadable(self) -> bool:
        """True once every verified length uses the shortcut (``model.preprocess`` stays on the main thread)."""
        return bool(self._fast) and all(self._fast.values())

    def verify(self, texts: list[str], max_length: int) -> dict[str, Any]:
        """Features of ``texts`` built on the calling thread, checking the shortcut for ``max_length``."""
        b = self._batcher(max_length, main=True)
        feats = b.features(texts, b.tokenize(texts), verify=True)
        self._fast[max_length] = bool(b.fast)
        self._extras[max_length] = b.extras
        return self._finish(feats)

    def __call__(self, texts: list[str], max_length: int) -> dict[str, Any]:
        if max_length not in self._fast:
            return self.verify(texts, max_length)
        b = self._batcher(max_length, main=not self._fast[max_length])
        return self._finish(b.features(texts, b.tokenize(texts)))

    def accepts(self, key: Any, query_max_length: int, doc_max_length: int, query_prompt: str,
                doc_prompt: str) -> bool:
        """True when stored ids made under ``key`` are this model's ids at these lengths and prompts."""
        from drmix.data.tokenized import TokenKey, tokenizer_fingerprint

        if key is None:
            return False
        if self._fingerprint is None:
            self._fingerprint = tokenizer_fingerprint(self.model) or ""
        return key == TokenKey(self._fingerprint, int(query_max_length), int(doc_max_length), query_prompt,
                               doc_prompt)

    def from_ids(self, texts: Any, ids: list[np.ndarray], max_length: int) -> dict[str, Any]:
        """Features of a batch whose ids are stored (:mod:`drmix.data.tokenized`): a pad, no tokenisation.

        The first call for a length builds the features from ``texts`` (checking the shortcut against
        ``model.preprocess``) and also checks that the stored ids equal the tokenizer's ids of those texts;
        if either differs, this length trains from text from then on (logged once).
        """
        ok = self._ids_ok.get(max_length)
        if ok is None:
            texts = list(texts)
            feats = self.verify(texts, max_length) if max_length not in self._fast else self(texts, max_length)
            ok = bool(self._fast[max_length])
            if ok:
                fresh = self._batcher(max_length, main=True).tokenize(texts)
                ok = fresh is not None and len(fresh) == len(ids) and all(
                    len(a) == len(b) and bool(np.array_equal(np.asarray(a), b)) for a, b in zip(fresh, ids))
            if not ok:
                log.warning("stored token ids differ from what the model's preprocessing gives at max length %d; "
                            "tokenising on the fly", max_length)
            self._ids_ok[max_length] = ok
            return feats
        if not ok:
            return self(list(texts), max_length)
        return self._finish(self._batcher(max_length, main=False).padded(ids))

    def _finish(self, feats: dict[str, Any]) -> dict[str, Any]:
        if not self.pin:
            return feats
        return {k: (v.pin_memory() if isinstance(v, torch.Tensor) else v) for k, v in feats.items()}


def host_inputs(featurize: Featurizer, batch: Batch, num_neg: int, *, query_max_length: int, doc_max_length: int,
                query_prompt: str = "", doc_prompt: str = "") -> tuple[dict, dict, torch.Tensor]:
    """A batch's padded (pinned on CUDA) CPU tensors: queries, documents (positives, then each example's
    first ``num_neg`` negatives in order) and the ``[B, num_neg]`` mask of the negatives present.

    When the batch carries stored ids made for this model, lengths and prompts (:mod:`drmix.data.tokenized`)
    the features are padded from them; otherwise the texts are tokenised. Both give the same tensors
    (:meth:`Featurizer.from_ids` checks it on the first batch).
    """
    tok = batch.tokens
    if tok is not None and featurize.accepts(tok.key, query_max_length, doc_max_length, query_prompt, doc_prompt):
        counts = [min(len(n), num_neg) for n in tok.negatives]
        mask = torch.zeros(len(batch), num_neg, dtype=torch.bool)
        for i, c in enumerate(counts):
            mask[i, :c] = True
        q_texts = _Prefixed(query_prompt, batch.queries)
        d_texts = _Prefixed(doc_prompt, _DocTexts(batch, num_neg))
        q = featurize.from_ids(q_texts, tok.queries, query_max_length)
        d_ids = list(tok.positives) + [x for n in tok.negatives for x in n[:num_neg]]
        d = featurize.from_ids(d_texts, d_ids, doc_max_length)
        return q, d, mask
    negs = [n[:num_neg] for n in batch.negatives]
    mask = torch.zeros(len(batch), num_neg, dtype=torch.bool)
    for i, n in enumerate(negs):
        mask[i, :len(n)] = True
    docs = [doc_prompt + d for d in batch.positives] + [doc_prompt + d for n in negs for d in n]
    q = featurize([query_prompt + t for t in batch.queries], query_max_length)
    d = featurize(docs, doc_max_length)
    return q, d, mask


class _Prefixed:
    """``prefix + text`` for each text, built only when iterated (stored ids rarely need the texts)."""

    def __init__(self, prefix: str, texts) -> None:
        self.prefix, self.texts = prefix, texts

    def __iter__(self):
        return (self.prefix + t for t in self.texts)


class _DocTexts:
    """Positives then the first ``num_neg`` negatives of each example, read only when iterated."""

    def __init__(self, batch: Batch, num_neg: int) -> None:
        self.batch, self.num_neg = batch, num_neg

    def __iter__(self):
        yield from self.batch.positives
        for n in self.batch.negatives:
            yield from list(n)[:self.num_neg]


@dataclass
class _Pending:
    weights: np.ndarray
    sampler_state: dict
    builder_state: dict
    pairs: list[tuple[int, int]]
    batch: Batch
    result: Future


def _set_sampler_state(sampler: MixtureSampler, state: dict) -> None:
    """Restore a sampler without dropping its permutation cache (keyed by epoch, so it stays valid)."""
    sampler.set_state(state)


def _replay(sampler: MixtureSampler, state: dict, weights: np.ndarray) -> tuple[list[tuple[int, int]], dict]:
    """Rows a sampler in ``state`` would draw with ``weights``, and its state afterwards (no side effects)."""
    clone = sampler.replica()
    _set_sampler_state(clone, state)
    pairs = clone.next_indices(weights)
    return pairs, clone.state_dict()


class InputPipeline:
    """Draws global batches with the strategy's weights and prepares them ahead on background threads.

    ``prepare(batch)`` turns a drawn :class:`Batch` into whatever the step needs (tensors); it runs on a
    worker thread for batches drawn ahead. ``prefetch=0`` (or ``workers=0``) prepares synchronously.
    """

    def __init__(self, sampler: MixtureSampler, builder: RowBuilder, prepare: Callable[[Batch], Any], *,
                 prefetch: int = 2, workers: int = 1, threadable: Callable[[], bool] = lambda: True) -> None:
        self.sampler = sampler
        self.builder = builder
        self.prepare = prepare
        self.prefetch = max(0, int(prefetch)) if workers > 0 else 0
        self.threadable = threadable
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="drmix-inputs") if self.prefetch else None
        self._pending: deque[_Pending] = deque()
        self.replays = 0  # speculative batches whose weights changed but whose rows did not
        self.redraws = 0  # speculative batches dropped because the new weights drew other rows

    # -- drawing ----------------------------------------------------------------------------------
    def _draw(self, weights: np.ndarray, *, ahead: bool) -> _Pending:
        s_state, b_state = self.sampler.state_dict(), self.builder.state_dict()
        pairs = self.sampler.next_indices(weights)
        batch = self.builder.build(pairs)
        fut: Future = Future()
        if ahead:
            fut = self._pool.submit(self.prepare, batch)
        else:
            fut.set_result(self.prepare(batch))
        return _Pending(np.array(weights, dtype=np.float64, copy=True), s_state, b_state, pairs, batch, fut)

    def _rollback(self, item: _Pending) -> None:
        for p in self._pending:
            p.result.cancel()
        self._pending.clear()
        _set_sampler_state(self.sampler, item.sampler_state)
        self.builder.load_state_dict(item.builder_state)

    def _usable(self, item: _Pending, weights: np.ndarray) -> bool:
        if np.array_equal(item.weights, weights):
            return True
        pairs, after = _replay(self.sampler, item.sampler_state, weights)
        nxt = self._pending[1].sampler_state if len(self._pending) > 1 else self.sampler.state_dict()
        if pairs != item.pairs:
            return False
        if after != nxt:  # same rows, but the sampler's stream moved differently: redraw what follows
            for p in list(self._pending)[1:]:
                p.result.cancel()
            following = list(self._pending)[1:2]
            builder_next = following[0].builder_state if following else self.builder.state_dict()
            while len(self._pending) > 1:
                self._pending.pop()
            _set_sampler_state(self.sampler, after)
            self.builder.load_state_dict(builder_next)
        self.replays += 1
        return True

    def next(self, weights: np.ndarray) -> tuple[Batch, Any]:
        """The next global batch drawn with ``weights`` and its prepared inputs."""
        w = np.asarray(weights, dtype=np.float64)
        item = None
        if self._pending:
            head = self._pending[0]
            if self._usable(head, w):
                item = self._pending.popleft()
            else:
                self.redraws += 1
                self._rollback(head)
        if item is None:
            item = self._draw(w, ahead=False)
        if self.prefetch and self.threadable():
            while len(self._pending) < self.prefetch:
                self._pending.append(self._draw(w, ahead=True))
        return item.batch, item.result.result()

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Sampler and builder state before the first batch not yet handed out (exact resume)."""
        if self._pending:
            head = self._pending[0]
            return {"sampler": copy.deepcopy(head.sampler_state), "builder": copy.deepcopy(head.builder_state)}
        return {"sampler": self.sampler.state_dict(), "builder": self.builder.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for p in self._pending:
            p.result.cancel()
        self._pending.clear()
        self.sampler.load_state_dict(state["sampler"])
        self.builder.load_state_dict(state["builder"])

    def close(self) -> None:
        for p in self._pending:
            p.result.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self.prefetch = 0  # a later next() prepares synchronously
