"""Texts to embeddings: the encoder behind ``drmix index``, ``drmix eval``, mining and multi-corpus search.

:func:`encode_texts` embeds texts in batches sorted by *token* length (longest first), under
``torch.inference_mode`` with the model in eval mode (its previous mode restored afterwards, so the trainer
can call it mid-training), and returns float32 rows in the input order. Each text is tokenised once: the ids
that give the lengths are padded per batch to the batch's longest text (dynamic padding) rather than
tokenised again. ``SentenceTransformer.encode`` sorts by character count, which mixes texts that truncate to
different token counts and so computes more pad tokens (measured in docs/benchmarks.md). The hand padding is
checked against ``model.preprocess`` on the first batches and abandoned for ``preprocess`` if anything
differs, so every SentenceTransformer module (prompts, prompt-aware pooling, custom input modules) still sees
exactly what it would see from ``encode``.

Texts are taken in chunks of ``_SORT_CHUNK``, each sorted by token length, which bounds the memory held by
token ids, and each chunk is encoded batch by batch (:func:`_encode_chunk`). The next chunks are tokenised
while the current one is encoded (:class:`_ChunkTokens`): by ``tokenize_num_proc`` worker processes
(:mod:`drmix.retrieval.tokenize_pool`; every core by default, long texts cut where the cut provably keeps
the ids, :mod:`drmix.model.pretokenize`), or with ``tokenize_num_proc=1`` on one background thread as
before. The chunks and batches are the same either way, so the embeddings are the same bit for bit.
``cache_embeddings`` looks each text up in :mod:`drmix.retrieval.embedding_cache` first and encodes only the
texts the model has not encoded with these settings, storing each finished chunk.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from drmix.errors import ConfigError

log = logging.getLogger(__name__)

_LENGTH_CHUNK = 4096  # texts tokenised per call when measuring lengths (bounds memory on big corpora)
_SORT_CHUNK = 16384  # texts tokenised and length-sorted together by encode_texts
_PROC_MIN_TEXTS = 2048  # below this, tokenising in process is quicker than starting workers


def model_normalizes(model: Any) -> bool:
    """True when scores should be cosines: the model declares cosine similarity (the ST default)."""
    name = getattr(model, "similarity_fn_name", "cosine")
    if name not in ("cosine", "dot"):
        log.warning("model similarity %r is not an inner product; indexing with cosine instead", name)
        return True
    return name == "cosine"


def token_lengths(model: Any, texts: Sequence[str], prompt: str, max_length: int | None) -> np.ndarray:
    """Token count of each (prompted, truncated) text; character count when the model has no tokenizer."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None or not callable(tokenizer):
        return np.fromiter((len(prompt) + len(t) for t in texts), dtype=np.int64, count=len(texts))
    limit = max_length or getattr(model, "max_seq_length", None)
    kwargs: dict[str, Any] = {"add_special_tokens": True, "return_attention_mask": False,
                              "return_token_type_ids": False}
    if limit:
        kwargs.update(truncation=True, max_length=int(limit))
    lengths = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), _LENGTH_CHUNK):
        chunk = [prompt + t for t in texts[start:start + _LENGTH_CHUNK]]
        ids = tokenizer(chunk, **kwargs)["input_ids"]
        lengths[start:start + len(chunk)] = [len(x) for x in ids]
    return lengths


def length_order(lengths: np.ndarray) -> np.ndarray:
    """Indices sorted by length, longest first; ties keep input order (stable)."""
    return np.argsort(-lengths, kind="stable")


def embedding_dim(model: Any) -> int:
    """The model's embedding size (0 when it does not say)."""
    for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        fn = getattr(model, name, None)
        if callable(fn):
            return int(fn() or 0)
    return 0


class _ChunkTokens:
    """The token ids of each chunk of texts (None where the model has no fast tokenizer): read from the
    on-disk cache (``cache_ids``), made ahead in worker processes (``num_proc`` > 1 and at least
    ``_PROC_MIN_TEXTS`` texts: :class:`~drmix.retrieval.tokenize_pool.TokenizePool`, the next two chunks
    while this one is encoded), or tokenised in process -- the next chunk on a background thread, with a
    private copy of the tokenizer (a fast tokenizer must not be shared between threads)."""

    def __init__(self, model: Any, texts: list[str], batcher: Any, prompt: str, max_length: int | None,
                 cache_ids: bool, num_proc: int = 1) -> None:
        import copy

        from drmix.model.features import TextBatcher

        self.texts, self.batcher = texts, batcher
        self.stored = None
        if cache_ids and batcher.tokenizer is not None and texts:
            from drmix.data.tokenized import corpus_ids

            self.stored = corpus_ids(model, texts, prompt=prompt, max_length=batcher.limit)
        self.num_proc = (num_proc if batcher.tokenizer is not None and self.stored is None
                         and len(texts) >= _PROC_MIN_TEXTS else 1)
        self.ahead = (TextBatcher(model, prompt, max_length, tokenizer=copy.deepcopy(batcher.tokenizer))
                      if batcher.tokenizer is not None and len(texts) > _SORT_CHUNK and self.stored is None
                      and self.num_proc == 1 else None)
        self.pool = None
        self.procs = None
        self.handles: dict[int, Any] = {}
        self.pending = None

    def __enter__(self) -> "_ChunkTokens":
        from concurrent.futures import ThreadPoolExecutor

        if self.num_proc > 1:
            from drmix.retrieval.tokenize_pool import TokenizePool

            self.procs = TokenizePool(self.batcher.tokenizer, prompt=self.batcher.prompt, max_length=self.batcher.limit,
                                      num_proc=self.num_proc)
        elif self.ahead is not None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drmix-tokenize")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.procs is not None:
            self.procs.close()

    def _from_processes(self, start: int, chunk: list[str]) -> list[Any] | None:
        for ahead in (start, start + _SORT_CHUNK, start + 2 * _SORT_CHUNK):
            if ahead < len(self.texts) and ahead not in self.handles:
                self.handles[ahead] = self.procs.submit(self.texts[ahead:ahead + _SORT_CHUNK])
        from concurrent.futures.process import BrokenProcessPool

        try:
            ids = self.procs.result(self.handles.pop(start))
        except BrokenProcessPool as e:  # a worker was killed (out of memory): tokenise here from now on
            log.warning("a tokenising worker process died (%s); tokenising in this process", e)
            self.procs.ok = False
            ids = None
        return ids if ids is not None else self.batcher.tokenize(chunk)

    def ids(self, start: int) -> list[Any] | None:
        """The ids of ``texts[start:start + _SORT_CHUNK]``; starts tokenising the chunk(s) after it."""
        chunk = self.texts[start:start + _SORT_CHUNK]
        if self.stored is not None:
            return self.stored.rows(start, start + len(chunk)) if self.batcher.fast is not False else None
        if self.procs is not None and self.procs.ok is not False:
            return self._from_processes(start, chunk) if self.batcher.fast is not False else None
        if self.procs is not None:
            return self.batcher.tokenize(chunk)
        ids = self.pending.result() if self.pending is not None else self.batcher.tokenize(chunk)
        nxt = self.texts[start + _SORT_CHUNK:start + 2 * _SORT_CHUNK]
        self.pending = (self.pool.submit(self.ahead.tokenize, nxt)
                        if self.pool is not None and nxt and self.batcher.fast is not False else None)
        return ids


def _encode_chunk(model: Any, batcher: Any, chunk: list[str], ids: list[list[int]] | None, *, first: bool,
                  batch_size: int, prompt: str, max_length: int | None, normalize: bool, bar: Any
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(order, embeddings in that order) of one chunk: length-sorted batches, one device-to-host copy."""
    import torch

    from drmix.device import to_device

    lengths = (np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(chunk)) if ids is not None
               else token_lengths(model, chunk, prompt, max_length))
    order = length_order(lengths)
    truncate_dim = getattr(model, "truncate_dim", None)
    device = getattr(model, "device", None)
    pin = device is not None and torch.device(device).type == "cuda"
    embs = []
    for start in range(0, len(chunk), batch_size):
        idx = order[start:start + batch_size]
        # the shortcut is checked on the longest and the shortest batch of the first chunk
        verify = first and start + batch_size >= len(chunk)
        features = batcher.features([chunk[i] for i in idx], [ids[i] for i in idx] if ids is not None else None,
                                    verify=verify)
        if pin:
            features = {k: (v.pin_memory() if isinstance(v, torch.Tensor) else v) for k, v in features.items()}
        if device is not None:
            features = to_device(features, device)
        emb = model(features)["sentence_embedding"]
        if truncate_dim:
            emb = emb[:, :truncate_dim]
        if normalize:
            emb = torch.nn.functional.normalize(emb.float(), p=2, dim=1)
        embs.append(emb.float())
        bar.update(len(idx))
    return order, torch.cat(embs).cpu().numpy()  # one device-to-host copy per chunk (no sync per batch)


def _shard_devices(model: Any, n: int, devices: Sequence[str] | None) -> Sequence[str] | None:
    """The devices to encode shards on in parallel, or None for one device."""
    from drmix.device import model_device
    from drmix.retrieval.accel import SHARD_MIN_TEXTS, visible_gpus

    if devices is None and model_device(model).type == "cuda" and n >= SHARD_MIN_TEXTS and len(visible_gpus()) > 1:
        devices = visible_gpus()
    return devices if devices is not None and len(devices) > 1 else None


@dataclass(frozen=True)
class EncodeDefaults:
    """Defaults of :func:`encode_texts`'s ``tokenize_num_proc`` and ``cache_embeddings`` (``None`` there)."""

    tokenize_num_proc: int | None = None  # None or 0: every available core
    cache_embeddings: bool = False


_DEFAULTS: ContextVar[EncodeDefaults] = ContextVar("drmix_encode_defaults", default=EncodeDefaults())


@contextmanager
def encode_defaults(*, tokenize_num_proc: int | None = None, cache_embeddings: bool | None = None) -> Iterator[None]:
    """Within the block, every :func:`encode_texts` call that leaves ``tokenize_num_proc`` / ``cache_embeddings``
    at ``None`` uses these (how ``drmix index``, ``eval`` and ``mine`` hand their options to the encodes deep
    inside indexing and evaluation); arguments left at ``None`` keep the current default."""
    cur = _DEFAULTS.get()
    token = _DEFAULTS.set(EncodeDefaults(
        cur.tokenize_num_proc if tokenize_num_proc is None else tokenize_num_proc,
        cur.cache_embeddings if cache_embeddings is None else bool(cache_embeddings)))
    try:
        yield
    finally:
        _DEFAULTS.reset(token)


def _encode_cached(model: Any, texts: list[str], *, prompt: str, max_length: int | None, normalize: bool,
                   precision: str | None, encode: Any) -> np.ndarray:
    """Rows from the embedding cache; ``encode(texts, sink)`` encodes the distinct texts not found (see
    :mod:`drmix.retrieval.embedding_cache`), each finished chunk stored as it comes."""
    from drmix.retrieval.embedding_cache import KEY_BYTES, EmbeddingCache, text_keys

    cache = EmbeddingCache(model, prompt=prompt, max_length=max_length, normalize=normalize, precision=precision)
    keys = text_keys(texts)
    found, rows = cache.lookup(keys)
    missing = np.nonzero(~found)[0]
    _, first = np.unique(keys[missing].view(np.dtype((np.void, KEY_BYTES))).ravel(), return_index=True)
    todo = missing[np.sort(first)]  # each distinct missing text once, in input order
    log.info("embedding cache: %d of %d texts found, %d to encode", int(found.sum()), len(texts), len(todo))
    if len(todo) == 0:
        return rows if rows is not None else np.zeros((0, embedding_dim(model)), dtype=np.float32)
    fresh = encode([texts[i] for i in todo], lambda idx, emb: cache.store(keys[todo[idx]], emb))
    out = rows if rows is not None else np.empty((len(texts), fresh.shape[1]), dtype=np.float32)
    out[todo] = fresh
    if len(missing) > len(todo):  # repeated texts: copy the row of their first occurrence
        pos = {keys[i].tobytes(): j for j, i in enumerate(todo)}
        for i in missing:
            out[i] = fresh[pos[keys[i].tobytes()]]
    return out


def encode_texts(model: Any, texts: Sequence[str], *, batch_size: int = 64, prompt: str = "",
                 max_length: int | None = None, show_progress: bool = False,
                 normalize: bool = False, precision: str | None = "auto",
                 devices: Sequence[str] | None = None, cache_ids: bool = False,
                 tokenize_num_proc: int | None = None, cache_embeddings: bool | None = None,
                 _sink: Callable[[np.ndarray, np.ndarray], None] | None = None) -> np.ndarray:
    """Embed ``texts`` with a SentenceTransformer; float32 ``[len(texts), dim]`` in input order.

    ``prompt`` is prepended to every text (and handed to the model so prompt-aware pooling works);
    ``max_length`` caps tokens per text (default: the model's ``max_seq_length``); ``normalize``
    L2-normalises the rows. The model's ``truncate_dim`` (Matryoshka) is honoured.
    ``precision``: ``auto`` (fp16/bf16 on a GPU, fp32 on CPU) | ``fp32`` | ``fp16`` | ``bf16`` | ``int8``
    (CPU dynamic quantisation) | ``onnx`` | ``onnx-int8`` (CPU, ONNX Runtime), see :mod:`drmix.retrieval.accel`.
    ``devices``: encode shards on these devices in parallel (default: every visible GPU when the model is on a
    GPU and there are at least ``SHARD_MIN_TEXTS`` texts). ``cache_ids``: tokenise the texts once and keep the
    ids on disk (:func:`drmix.data.tokenized.corpus_ids`, keyed by the texts' content, the tokenizer, the prompt
    and the length), so encoding the same corpus again (every model a benchmark evaluates) only pads; the ids
    are checked against ``model.preprocess`` like freshly tokenised ones.
    ``tokenize_num_proc``: worker processes that tokenise ahead of the encoder (:mod:`drmix.retrieval.tokenize_pool`;
    ``None``: the :func:`encode_defaults` value, every available core unless set; ``1``: tokenise in this
    process, on a background thread). ``cache_embeddings``: reuse and store rows in the embedding cache, keyed
    by the model's weights, the settings and each text's content (:mod:`drmix.retrieval.embedding_cache`;
    ``None``: the :func:`encode_defaults` value, off unless set). ``show_progress``: a bar in passages, with
    passages/s and the time left.
    """
    from drmix.device import model_device
    from drmix.retrieval.accel import encode_sharded
    from drmix.retrieval.embedding_cache import disabled as cache_disabled
    from drmix.retrieval.tokenize_pool import resolve_num_proc

    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1, got {batch_size}.", fix="pass --batch-size 1 or more.")
    texts = list(texts)
    n = len(texts)
    defaults = _DEFAULTS.get()
    num_proc = resolve_num_proc(defaults.tokenize_num_proc if tokenize_num_proc is None else tokenize_num_proc)
    cache = defaults.cache_embeddings if cache_embeddings is None else cache_embeddings
    if cache and n and not cache_disabled():
        return _encode_cached(model, texts, prompt=prompt, max_length=max_length, normalize=normalize,
                              precision=precision, encode=lambda part, sink: encode_texts(
                                  model, part, batch_size=batch_size, prompt=prompt, max_length=max_length,
                                  show_progress=show_progress, normalize=normalize, precision=precision,
                                  devices=devices, cache_ids=cache_ids, tokenize_num_proc=num_proc,
                                  cache_embeddings=False, _sink=sink))
    shards = _shard_devices(model, n, devices)
    if shards is not None:
        out = encode_sharded(model, texts, shards, lambda m, part: encode_texts(
            m, part, batch_size=batch_size, prompt=prompt, max_length=max_length, normalize=normalize,
            precision=precision, devices=[str(model_device(m))], tokenize_num_proc=max(1, num_proc // len(shards)),
            cache_embeddings=False))  # the cores shared among the devices' encodes
        if _sink is not None:
            _sink(np.arange(n), out)
        return out
    return _encode_here(model, texts, batch_size=batch_size, prompt=prompt, max_length=max_length,
                        show_progress=show_progress, normalize=normalize, precision=precision, cache_ids=cache_ids,
                        num_proc=num_proc, sink=_sink)


def _encode_here(model: Any, texts: list[str], *, batch_size: int, prompt: str, max_length: int | None,
                 show_progress: bool, normalize: bool, precision: str | None, cache_ids: bool, num_proc: int,
                 sink: Callable[[np.ndarray, np.ndarray], None] | None) -> np.ndarray:
    """:func:`encode_texts` on the model's own device, in length-sorted chunks (the model's training mode kept)."""
    import torch
    from tqdm.auto import tqdm

    from drmix.model.features import TextBatcher
    from drmix.retrieval.accel import inference_setup

    n = len(texts)
    owner = model
    model, autocast = inference_setup(model, precision)
    batcher = TextBatcher(model, prompt, max_length)
    tokens = _ChunkTokens(model, texts, batcher, prompt, max_length, cache_ids, num_proc)
    out: np.ndarray | None = None
    was_training = bool(getattr(owner, "training", False))
    model.eval()
    bar = tqdm(total=n, desc="encoding", unit="passage", unit_scale=True, dynamic_ncols=True,
               disable=not show_progress)
    try:
        with tokens, torch.inference_mode(), autocast():
            for start in range(0, n, _SORT_CHUNK):
                chunk = texts[start:start + _SORT_CHUNK]
                order, emb = _encode_chunk(model, batcher, chunk, tokens.ids(start), first=start == 0,
                                           batch_size=batch_size, prompt=prompt, max_length=max_length,
                                           normalize=normalize, bar=bar)
                if out is None:
                    out = np.empty((n, emb.shape[1]), dtype=np.float32)
                out[order + start] = emb
                if sink is not None:
                    sink(order + start, emb)
    finally:
        bar.close()
        owner.train(was_training)
    return out if out is not None else np.zeros((0, embedding_dim(model)), dtype=np.float32)
