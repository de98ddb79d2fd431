"""Index backends: in-memory (:class:`~drmix.retrieval.index.DenseIndex`), FAISS on disk, Milvus
(embedded Milvus Lite or a server). See :mod:`drmix.retrieval.backends.base`."""
from __future__ import annotations

from drmix.retrieval.backends.base import (
    BACKENDS,
    BackendSpec,
    ChunkChecker,
    Chunks,
    backend,
    backend_for,
    check_model,
    chunks_from_npy,
    encode_chunks,
    model_fingerprint,
    model_record,
    open_index,
    register_backend,
    resolve_kind,
)

__all__ = ["BACKENDS", "BackendSpec", "ChunkChecker", "Chunks", "backend", "backend_for", "build_index",
           "check_model", "chunks_from_npy", "encode_chunks", "model_fingerprint", "model_record", "open_index",
           "register_backend", "resolve_kind"]


def build_index(backend_name: str, target: str, chunks: Chunks, *, kind: str | None = None,
                metadata: dict | None = None, overwrite: bool = False, corpus=None, **params) -> str:
    """Build an index with a backend from ``(ids, vectors)`` chunks; returns its location."""
    spec = backend(backend_name)
    kind = resolve_kind(spec, kind)
    meta = dict(metadata or {})
    spec.check(target, meta, overwrite)
    return spec.build(target, chunks, meta, kind, params, overwrite, corpus)
