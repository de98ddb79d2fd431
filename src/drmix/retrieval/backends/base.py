"""The index-backend interface: where ``drmix index`` writes vectors and what ``drmix search`` reads.

A backend is a :class:`BackendSpec` registered in :data:`BACKENDS` (the one registry idiom of
:mod:`drmix.registry`): ``memory`` (:class:`~drmix.retrieval.index.DenseIndex`: exact torch search, FAISS
HNSW/IVF in RAM), ``faiss-disk`` (FAISS IVF-PQ / IVF-flat with on-disk inverted lists, memory-mapped at search)
and ``milvus`` (a Milvus collection: Milvus Lite embedded in the process for a ``.db`` path, a Milvus
standalone or cluster for an ``http://HOST:19530`` URI). A package adds its own through the
``drmix.index_backends`` entry-point group.

Builds take vectors in chunks -- an iterable of ``(ids, float32 [n, dim] array)`` -- so a corpus larger than
RAM (or the ``.npy`` shards of a sharded encoder) streams in. Every opened index answers the same calls as
:class:`~drmix.retrieval.index.DenseIndex`: ``len(index)``, ``index.dim``, ``index.metadata``,
``index.search(queries, k) -> (scores, ids)``, ``index.doc(doc_id)`` and ``index.sample_vectors(size, seed)``
(the background sample of multi-corpus ``zscore``/``calibrated``).

Backends that record the model (``faiss-disk``, ``milvus``) store its fingerprint (a hash of its weights),
dimension, pooling and normalisation; :func:`check_model` refuses a search with another model, naming both.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import ConfigError, DataError, ModelError
from drmix.registry import Registry

#: an iterable of ``(ids, vectors)`` chunks: ``len(ids) == len(vectors)``, vectors float32 ``[n, dim]``
Chunks = Iterable[tuple[list[str], np.ndarray]]


@dataclass(frozen=True)
class BackendSpec:
    """One index backend.

    ``kinds``: the index types it builds (the first is its default); ``claims(location)``: whether a
    location string (a folder, a ``.db`` file, a URI) is one of its indexes; ``check(target, meta,
    overwrite)``: refuse a target before anything is encoded; ``build(target, chunks, meta, kind, params,
    overwrite, corpus)``: write the index atomically and return where it is; ``open(location)``: the
    searchable index.
    """

    name: str
    help: str
    kinds: tuple[str, ...]
    claims: Callable[[str], bool]
    check: Callable[..., None]
    build: Callable[..., str]
    open: Callable[[str], Any]
    order: int = 100


BUILTIN = tuple(f"drmix.retrieval.backends.{m}" for m in ("memory", "faiss_disk", "milvus"))
BACKENDS: Registry[BackendSpec] = Registry("index backend", BUILTIN, entry_points="drmix.index_backends",
                                           order=lambda s: s.order)


#: the backend ``drmix index`` (and ``drmix adapt``'s index stage) uses unless told otherwise
DEFAULT_BACKEND = "memory"


def check_target(name: str, *, uri: str | None, uri_flag: str = "--uri", backend_flag: str = "--backend") -> None:
    """Refuse a target that does not fit backend ``name``: milvus writes a collection (``uri`` needed, no folder),
    every other backend a folder (no ``uri``). The flags name the options of the command that asks."""
    if name == "milvus":
        if uri is None:
            raise ConfigError(f"{backend_flag} milvus writes a collection: give {uri_flag}.",
                              fix=f"pass {uri_flag} runs/x/index.db (Milvus Lite) or {uri_flag} http://HOST:19530.")
    elif uri is not None:
        raise ConfigError(f"{backend_flag} {name} writes a folder; {uri_flag} is for {backend_flag} milvus.",
                          fix=f"drop {uri_flag}, or pass {backend_flag} milvus.")


def register_backend(spec: BackendSpec) -> BackendSpec:
    """Register an index backend (called by its module at import time)."""
    return BACKENDS.register(spec)


def backend(name: str) -> BackendSpec:
    return BACKENDS.get(name)


def backend_for(location: str | Path) -> BackendSpec:
    """The backend whose index ``location`` is (a URI or ``.db`` path: milvus; a folder: its meta.json)."""
    loc = str(location)
    for spec in BACKENDS:
        if spec.name != "memory" and spec.claims(loc):
            return spec
    return backend("memory")


def open_index(location: str | Path, model: Any | None = None) -> Any:
    """Open the index at ``location`` with its backend; with ``model``, refuse a model other than the one
    the index records (:func:`check_model`)."""
    index = backend_for(location).open(str(location))
    if model is not None:
        check_model(index.metadata, model, where=str(location))
    return index


def resolve_kind(spec: BackendSpec, kind: str | None) -> str:
    kind = (kind or spec.kinds[0]).lower().replace("_", "-")
    if kind not in spec.kinds:
        raise ConfigError(f"the {spec.name} backend has no index kind {kind!r}.",
                          fix=f"pass --kind {' or '.join(spec.kinds)} (default {spec.kinds[0]}).")
    return kind


# ----------------------------------------------------------------------------------------------- the model

def model_fingerprint(model: Any, *, like: str | None = None) -> str:
    """The digest of the model's weights rounded to bfloat16 (so the same weights loaded in fp32 or bf16 match;
    any change a fine-tuning step makes shows) and their names and shapes; ``""`` for an object without
    ``state_dict`` (:func:`drmix.fingerprint.tensors_digest`; ``like``: a recorded fingerprint, to check an index
    built by an earlier version at its own digest size)."""
    from drmix.fingerprint import tensors_digest

    return tensors_digest(model, bfloat16=True, like=like) if hasattr(model, "state_dict") else ""


def pooling_mode(model: Any) -> str | None:
    for module in getattr(model, "_modules", {}).values():
        mode = getattr(module, "pooling_mode", None)
        if mode is None and callable(getattr(module, "get_pooling_mode_str", None)):
            mode = module.get_pooling_mode_str()
        if mode is not None:
            return str(mode)
    return None


def model_record(model: Any, *, like: str | None = None) -> dict[str, Any]:
    """What an index records about the model that encoded it (``like``: see :func:`model_fingerprint`)."""
    from drmix.retrieval.encode import model_normalizes

    get_dim = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension",
                                                                         lambda: None)
    dim = get_dim()
    return {"fingerprint": model_fingerprint(model, like=like), "dim": dim, "pooling": pooling_mode(model),
            "normalized": model_normalizes(model)}


def check_model(meta: Mapping[str, Any], model: Any, *, where: str) -> None:
    """Refuse searching an index with a model other than the one that built it (fingerprint, dimension,
    normalisation), naming both."""
    want = meta.get("fingerprint")
    if not want:
        return
    got = model_record(model, like=want)
    built = meta.get("model", "?")
    from drmix.retrieval.index import model_name

    given = model_name(model)
    if got["dim"] is not None and meta.get("dim") is not None and int(got["dim"]) != int(meta["dim"]):
        raise ModelError(f"the index at {where} holds {meta['dim']}-d vectors of the model {built}; the model "
                         f"{given} gives {got['dim']}-d vectors.",
                         fix="search with the model the index was built with (drop --model), or rebuild the "
                             "index with drmix index --overwrite.")
    if got["fingerprint"] != want:
        raise ModelError(f"the index at {where} was built with the model {built} (fingerprint {want}); the "
                         f"query model {given} has fingerprint {got['fingerprint']}.",
                         fix="search with the model the index was built with (drop --model), or rebuild the "
                             "index with drmix index --overwrite.")
    if "normalized" in meta and bool(meta["normalized"]) != bool(got["normalized"]):
        raise ModelError(f"the index at {where} holds {'' if meta['normalized'] else 'un'}normalised vectors; "
                         f"the query model {given} {'normalises' if got['normalized'] else 'does not normalise'}.",
                         fix="search with the model the index was built with.")


# ----------------------------------------------------------------------------------------------- chunks

def encode_chunks(model: Any, corpus: Mapping[str, Mapping[str, str]], *, chunk_size: int = 100_000,
                  batch_size: int = 64, max_length: int | None = None, precision: str | None = "auto",
                  show_progress: bool = True) -> Iterator[tuple[list[str], np.ndarray]]:
    """Encode ``corpus`` in chunks of ``chunk_size`` documents (``title + " " + text`` with the model's
    document prompt, as :func:`~drmix.retrieval.index.index_corpus`): one chunk's vectors in RAM at a time."""
    from drmix.data.beir import doc_text
    from drmix.model.encoder import document_prompt
    from drmix.retrieval.encode import encode_texts, model_normalizes

    ids = list(corpus)
    normalize = model_normalizes(model)
    prompt = document_prompt(model)
    for start in range(0, len(ids), chunk_size):
        part = ids[start:start + chunk_size]
        emb = encode_texts(model, [doc_text(corpus[i]) for i in part], batch_size=batch_size, prompt=prompt,
                           max_length=max_length, show_progress=show_progress, normalize=normalize,
                           precision=precision)
        yield part, np.ascontiguousarray(emb, dtype=np.float32)


def chunks_from_npy(shards: Iterable[tuple[Iterable[str], str | Path]], *,
                    chunk_size: int = 100_000) -> Iterator[tuple[list[str], np.ndarray]]:
    """Chunks from ``.npy`` shards on disk (``(ids, path)`` pairs): each shard's rows read ``chunk_size`` at a
    time (:func:`drmix.retrieval.shards.npy_chunks`), so a shard larger than RAM streams in."""
    from drmix.retrieval.shards import npy_chunks

    for ids, path in shards:
        ids = [str(i) for i in ids]
        start = 0
        for part in npy_chunks(path, chunk_size):
            yield ids[start:start + len(part)], part
            start += len(part)
        if start != len(ids):
            raise DataError(f"{len(ids)} ids for {start} vectors.", path=path,
                            fix="pass the ids of the documents the shard holds, in its row order.")


class ChunkChecker:
    """Checks the chunks of a build as they stream in: one dimension, finite values, unique ids."""

    def __init__(self) -> None:
        self.dim: int | None = None
        self.count = 0
        self._seen: set[str] = set()

    def __call__(self, ids: list[str], vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = [str(i) for i in ids]
        if vectors.ndim != 2 or len(ids) != vectors.shape[0]:
            raise DataError(f"a chunk of {len(ids)} ids holds an array of shape {vectors.shape}.",
                            fix="pass one [n, dim] float32 array per chunk with one id per row.")
        if self.dim is None:
            self.dim = int(vectors.shape[1])
        elif vectors.shape[1] != self.dim:
            raise DataError(f"a chunk has dimension {vectors.shape[1]}, the first had {self.dim}.",
                            fix="encode every chunk with the same model.")
        if not np.isfinite(vectors).all():
            raise DataError("embeddings contain NaN or infinite values.", fix="check the model and its inputs.")
        for i in ids:
            if i in self._seen:
                raise DataError(f"duplicate document id {i!r}.", fix="give every document a unique id.")
            self._seen.add(i)
        self.count += len(ids)
        return ids, vectors

    def finish(self) -> None:
        if not self.count:
            raise DataError("no vectors to index.", fix="index a corpus with at least one document.")
