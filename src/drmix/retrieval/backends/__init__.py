"""Index backends: in-memory (:class:`~drmix.retrieval.backends.memory.DenseIndex`), FAISS on disk, Milvus
(embedded Milvus Lite or a server), and any a package registers. See :mod:`drmix.retrieval.backends.base`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from drmix.retrieval.backends.base import (
    BACKENDS,
    DEFAULT_BACKEND,
    BackendSpec,
    ChunkChecker,
    Chunks,
    Index,
    backend,
    backend_for,
    check_model,
    check_target,
    chunks_from_npy,
    collection_name,
    encode_chunks,
    is_location,
    model_fingerprint,
    model_record,
    open_index,
    register_backend,
    resolve_kind,
)

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "BackendSpec", "ChunkChecker", "Chunks", "Index", "backend",
           "backend_for", "build_encoded", "build_index", "check_index_room", "check_model", "check_target",
           "chunks_from_npy", "collection_name", "encode_chunks", "encoded_meta", "encoding_chunk", "index_documents",
           "is_location", "model_fingerprint", "model_record", "open_index", "register_backend", "resolve_kind"]


def build_index(backend_name: str, target: str, chunks: Chunks, *, kind: str | None = None,
                metadata: dict | None = None, overwrite: bool = False, corpus=None, **params) -> str:
    """Build an index with a backend from ``(ids, vectors)`` chunks; returns its location."""
    spec = backend(backend_name)
    kind = resolve_kind(spec, kind)
    meta = dict(metadata or {})
    spec.check(target, meta, overwrite)
    return spec.build(target, chunks, meta, kind, params, overwrite, corpus)


def index_documents(spec: BackendSpec, target: str, encoder, docs, meta: dict, *, kind: str, params: dict,
                    overwrite: bool = False, store_texts: bool = True, batch_size: int = 64,
                    max_length: int | None = None, precision: str = "auto", chunk_size: int | None = None) -> str:
    """Encode ``docs`` (``{id: {"title", "text"}}``) with ``encoder`` in chunks of ``chunk_size`` documents (default:
    the backend's ``chunk_size`` parameter, else the whole corpus) and stream them into ``spec``'s index at
    ``target`` (:func:`build_encoded`); returns its location."""
    chunk_size = chunk_size or encoding_chunk(spec, params)
    chunks = encode_chunks(encoder, docs, chunk_size=chunk_size or len(docs), batch_size=batch_size,
                           max_length=max_length, precision=precision)
    return build_encoded(spec, target, encoder, chunks, docs, meta, kind=kind, params=params, overwrite=overwrite,
                         store_texts=store_texts, max_length=max_length, precision=precision)


def build_encoded(spec: BackendSpec, target: str, encoder, chunks: Chunks, docs, meta: dict, *, kind: str,
                  params: dict, overwrite: bool = False, store_texts: bool = True, max_length: int | None = None,
                  precision: str = "auto") -> str:
    """Stream ``(ids, vectors)`` chunks that ``encoder`` made of ``docs`` into ``spec``'s index at ``target``;
    returns its location. ``meta`` gets what the index records about the model (:func:`model_record`, its
    document prompt, precision and length) and only the backend's own ``params`` reach it -- what ``drmix
    index`` does for every backend, from one process or from the shards of several."""
    encoded_meta(meta, encoder, precision=precision, max_length=max_length)
    return spec.build(target, chunks, meta, kind, spec.own_params(params), overwrite, docs if store_texts else None)


def encoded_meta(meta: dict, encoder, *, precision: str = "auto", max_length: int | None = None) -> dict:
    """Add to ``meta`` what an index records about the model that encoded it (:func:`model_record`, its document
    prompt, the precision and the length); returns ``meta``."""
    from drmix.model.encoder import document_prompt

    meta.update(model_record(encoder), document_prompt=document_prompt(encoder), precision=precision,
                max_length=max_length or getattr(encoder, "max_seq_length", None))
    return meta


def encoding_chunk(spec: BackendSpec, params: dict) -> int | None:
    """Documents encoded per chunk for ``spec``: its ``chunk_size`` parameter (given, else its default), or None
    (the whole corpus at once) for a backend without one."""
    if "chunk_size" not in spec.param_names():
        return None
    return int(spec.parse_params(spec.own_params(params)).chunk_size)


def check_index_room(output: str | Path, docs: dict[str, dict[str, str]], encoder: Any, *,
                     store_texts: bool) -> None:
    """Before encoding: refuse an index the disk (or ``ulimit -f``) has no room for (float32 vectors, plus
    the texts when stored: their length in characters, a lower bound of docs.jsonl's size), and say what
    is coming when the corpus is large or holds a huge document (its tokenising shows no progress)."""
    import logging

    from drmix.io.checks import check_free_space
    from drmix.retrieval.encode import embedding_dim

    dim = embedding_dim(encoder)
    vectors = len(docs) * int(dim) * 4
    sizes = {d: len(x.get("title", "")) + len(x.get("text", "")) for d, x in docs.items()}
    texts = sum(sizes.values())
    check_free_space(output, vectors + (texts if store_texts else 0), what=f"the index of {len(docs)} documents",
                     largest_file=max(vectors, texts if store_texts else 0))
    log = logging.getLogger("drmix.index")
    if texts > 50_000_000:
        log.info("tokenising %d documents (%.0f MB of text) before the encoding bar moves", len(docs), texts / 1e6)
    longest = max(sizes, key=sizes.get, default=None)
    if longest is not None and sizes[longest] > 1_000_000:
        limit = getattr(encoder, "max_seq_length", None)
        log.warning("document %r holds %.1f MB of text: tokenising it takes a while before the encoding bar "
                    "moves, and the model reads only its first %s tokens (split long documents into passages)",
                    longest, sizes[longest] / 1e6, limit or "few hundred")
