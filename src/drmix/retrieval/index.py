"""Encode a corpus into an in-memory index and search it: the Python API over the ``memory`` backend.

* :func:`index_corpus` encodes every document (``title + " " + text`` with the model's document prompt; in
  shards under torchrun when :func:`drmix.retrieval.shards.sharded_corpora` is active) into a
  :class:`~drmix.retrieval.backends.memory.DenseIndex` (exact torch search, FAISS HNSW or IVF);
  :func:`index_embeddings` builds the same from embeddings already encoded;
* :func:`search_queries` retrieves the top k documents of every query from any backend's index (anything with
  ``search(queries, k)``, :class:`drmix.retrieval.backends.base.Index`).

Encoding (texts to embeddings, length-sorted, tokenised once) is :mod:`drmix.retrieval.encode`; writing an
index of any backend from a corpus file is :mod:`drmix.retrieval.build` (``drmix index``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from drmix.errors import DataError
from drmix.retrieval.backends.base import model_location, model_name, warn_empty_texts
from drmix.retrieval.backends.folder import DOCS_FILE, OFFSETS_FILE, DocStore
from drmix.retrieval.backends.memory import DenseIndex, IndexOptions
from drmix.retrieval.encode import encode_texts, model_normalizes

__all__ = ["DOCS_FILE", "OFFSETS_FILE", "DenseIndex", "DocStore", "IndexOptions", "index_corpus",
           "index_embeddings", "model_name", "search_queries"]


def index_corpus(model: Any, corpus: Mapping[str, Mapping[str, str]], *, kind: str = "flat", batch_size: int = 64,
                 max_length: int | None = None, show_progress: bool = True, store_texts: bool = True,
                 metadata: dict[str, Any] | None = None, precision: str | None = "auto",
                 cache_ids: bool = False, **params: Any) -> DenseIndex:
    """Encode every document (``title + " " + text`` with the model's document prompt) into an index.

    ``metadata`` is merged into ``meta.json`` (drmix index records the model and corpus paths there);
    ``store_texts`` keeps the texts so the saved index can show them; ``cache_ids`` keeps the corpus's
    token ids on disk for the next model with the same tokenizer (:func:`~drmix.retrieval.encode.encode_texts`).
    A corpus with empty documents is indexed with a warning.
    """
    from drmix.data.beir import doc_text
    from drmix.model.encoder import document_prompt

    if not corpus:
        raise DataError("the corpus is empty.", fix="index a corpus with at least one document.")
    warn_empty_texts(corpus)
    ids = list(corpus)
    normalize = model_normalizes(model)
    prompt = document_prompt(model)
    from drmix.retrieval.shards import encode_corpus  # encode_texts, or in shards under torchrun (drmix eval)

    emb = encode_corpus(model, [doc_text(corpus[i]) for i in ids], batch_size=batch_size, prompt=prompt,
                        max_length=max_length, show_progress=show_progress, normalize=normalize, precision=precision,
                        cache_ids=cache_ids)
    return index_embeddings(model, corpus, emb, kind=kind, max_length=max_length, store_texts=store_texts,
                            metadata=metadata, precision=precision, **params)


def index_embeddings(model: Any, corpus: Mapping[str, Mapping[str, str]], embeddings: np.ndarray, *,
                     kind: str = "flat", max_length: int | None = None, store_texts: bool = True,
                     metadata: dict[str, Any] | None = None, precision: str | None = "auto",
                     **params: Any) -> DenseIndex:
    """The index :func:`index_corpus` builds, from embeddings already encoded (row i: the corpus's i-th
    document, encoded by ``model`` with its document prompt), e.g. merged from sharded encoding. The model is
    recorded as an absolute path when it was loaded from a local folder (:func:`model_location`)."""
    from drmix.model.encoder import document_prompt

    meta = {"model": model_location(model), "normalized": model_normalizes(model),
            "document_prompt": document_prompt(model), "precision": precision,
            "max_length": max_length or getattr(model, "max_seq_length", None)}
    meta.update(metadata or {})
    return DenseIndex.build(embeddings, list(corpus), kind=kind, metadata=meta,
                            corpus=corpus if store_texts else None, **params)


def search_queries(model: Any, index: Any, queries: Mapping[str, str], k: int = 100, *,
                   batch_size: int = 64, prompt: str | None = None, max_length: int | None = None,
                   show_progress: bool = False, precision: str | None = "auto") -> dict[str, dict[str, float]]:
    """Retrieve the top ``k`` documents per query: a run ``{query_id: {doc_id: score}}``.

    ``prompt=None`` uses the model's own query prompt; ``precision`` as in :func:`~drmix.retrieval.encode.encode_texts`.
    """
    from drmix.model.encoder import query_prompt

    qids = list(queries)
    if not qids:
        return {}
    prompt = query_prompt(model) if prompt is None else prompt
    emb = encode_texts(model, [queries[q] for q in qids], batch_size=batch_size, prompt=prompt,
                       max_length=max_length, show_progress=show_progress, normalize=model_normalizes(model),
                       precision=precision)
    scores, ids = index.search(emb, k)
    return {qid: {d: float(s) for d, s in zip(row_ids, row_scores)}
            for qid, row_ids, row_scores in zip(qids, ids, scores)}
