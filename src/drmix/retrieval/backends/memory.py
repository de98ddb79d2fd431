"""The ``memory`` backend (the default of ``drmix index``): :class:`DenseIndex`, an inner-product index held in
RAM with the id of each row, saved as a folder.

* ``flat`` (exact, default) is searched with torch, on the GPU when present (:mod:`drmix.retrieval.exact`);
  ``hnsw`` and ``ivf`` are FAISS indexes (FAISS imported only for these). Defaults follow the FAISS guidelines
  (HNSW M=32; IVF nlist ~ 4 sqrt(n), at most n/39).
* Saved as ``vectors.npy`` (flat) or ``index.faiss``, plus ``ids.json``, ``meta.json`` and, when the texts are
  stored, ``docs.jsonl`` + ``docs.offsets.npy`` (:mod:`drmix.retrieval.backends.folder`: the texts, and the
  files' sizes and checksums that opening checks), written atomically. Flat indexes saved as ``index.faiss`` by
  earlier versions still load.
* Scores are inner products. When the model declares cosine similarity (the SentenceTransformer default),
  embeddings are L2-normalised so the inner product is the cosine; ``dot`` models are left as they are.
"""
from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ValidationError

from drmix.errors import ConfigError, DataError, IndexLoadError, path_argument, wrong_argument
from drmix.retrieval.backends.base import (BackendSpec, ChunkChecker, Chunks, GraphAndClusterParams, empty_hits,
                                           register_backend)
from drmix.retrieval.backends.folder import IDS_FILE, DocStore, FolderIndex, json_text, read_json

log = logging.getLogger(__name__)

BACKEND = "memory"
FORMAT_VERSION = 2  # 2: flat indexes are vectors.npy searched with torch (1: index.faiss, still read)
INDEX_FILE = "index.faiss"
VECTORS_FILE = "vectors.npy"


class MemoryParams(GraphAndClusterParams):
    """The memory backend's parameters (``drmix index``'s flags of the same names)."""


class IndexOptions(MemoryParams):
    """The memory backend's parameters with the index kind (what :meth:`DenseIndex.build` checks)."""

    kind: Literal["flat", "hnsw", "ivf"] = "flat"


def _build_faiss(embeddings: np.ndarray, opts: IndexOptions) -> tuple[Any, dict[str, Any]]:
    """Build and fill the index; returns it and the parameters actually used."""
    from drmix.retrieval.backends.faiss_log import faiss_output_to_log
    from drmix.retrieval.exact import TorchFlatIndex

    n, dim = embeddings.shape
    if opts.kind == "flat":
        return TorchFlatIndex(embeddings), {}
    import faiss

    if opts.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, opts.M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = opts.ef_construction
        index.hnsw.efSearch = opts.ef_search
        index.add(embeddings)
        return index, {"M": opts.M, "ef_construction": opts.ef_construction, "ef_search": opts.ef_search}
    wanted = opts.nlist or max(1, int(4 * math.sqrt(n)))
    # FAISS k-means wants >= 39 training points per centroid; fewer gives poor clusters.
    nlist = min(wanted, n // 39)
    if nlist < 2:
        log.warning("IVF needs at least 78 vectors (39 per cluster, 2 clusters); got %d, so an exact flat "
                    "index is built instead", n)
        return TorchFlatIndex(embeddings), {"fallback": f"ivf needs >= 78 vectors, got {n}"}
    if nlist < wanted:
        log.warning("IVF nlist lowered from %d to %d: %d vectors allow at most n/39 clusters", wanted, nlist, n)
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = 0
    with faiss_output_to_log():
        index.train(embeddings)
    index.add(embeddings)
    index.nprobe = min(opts.nprobe, nlist)
    return index, {"nlist": nlist, "nprobe": index.nprobe}


def _kind_of(faiss_index: Any) -> str:
    from drmix.retrieval.exact import TorchFlatIndex

    if isinstance(faiss_index, TorchFlatIndex):
        return "flat"
    import faiss

    if isinstance(faiss_index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(faiss_index, faiss.IndexIVF):
        return "ivf"
    return "flat"


def _counts(items: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    return counts


class DenseIndex(FolderIndex):
    """A FAISS (or torch flat) inner-product index plus the document id of each row (and optionally the texts)."""

    backend = BACKEND

    def __init__(self, faiss_index: Any, ids: list[str], *, metadata: dict[str, Any] | None = None,
                 corpus: Mapping[str, Mapping[str, str]] | None = None, store: DocStore | None = None,
                 location: str | None = None) -> None:
        super().__init__(ids, metadata, store=store, corpus=corpus, location=location)
        self.index = faiss_index

    @property
    def kind(self) -> str:
        return _kind_of(self.index)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    # -- building in RAM
    @classmethod
    def build(cls, embeddings: np.ndarray, ids: Sequence[str], *, kind: str = "flat",
              metadata: dict[str, Any] | None = None, corpus: Mapping[str, Mapping[str, str]] | None = None,
              **params: Any) -> DenseIndex:
        """Index ``embeddings`` (row i is document ``ids[i]``). ``kind``: ``flat`` | ``hnsw`` | ``ivf``;
        ``params``: :class:`MemoryParams` fields (``M``, ``ef_construction``, ``ef_search``, ``nlist``,
        ``nprobe``). Pass ``corpus`` to store the documents' texts with the index."""
        try:
            opts = IndexOptions(kind=kind, **params)
        except ValidationError as e:
            err = e.errors()[0]
            raise ConfigError(f"invalid index option {'.'.join(map(str, err['loc']))}: {err['msg']}.",
                              fix="kind is flat, hnsw or ivf; options are M, ef_construction, ef_search, "
                                  "nlist, nprobe.") from None
        try:
            emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        except (TypeError, ValueError):
            raise wrong_argument("DenseIndex.build", "embeddings", embeddings, "an [n, dim] array of numbers",
                                 fix="pass model.encode(texts) (texts are encoded first).") from None
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):   # a string is not a list of ids
            raise wrong_argument("DenseIndex.build", "ids", ids, "a list of document ids, one per row",
                                 fix="pass ids=['d1', 'd2', ...] in the rows' order.")
        ids = [str(i) for i in ids]
        if emb.ndim != 2 or emb.shape[0] == 0:
            raise DataError(f"cannot index an embedding array of shape {emb.shape}.",
                            fix="pass a non-empty [n, dim] array (is the corpus empty?).")
        if len(ids) != emb.shape[0]:
            raise DataError(f"{len(ids)} ids for {emb.shape[0]} embeddings.", fix="pass one id per embedding row.")
        if len(set(ids)) != len(ids):
            dup = next(i for i, c in _counts(ids).items() if c > 1)
            raise DataError(f"duplicate document id {dup!r}.", fix="give every document a unique id.")
        if not np.isfinite(emb).all():
            raise DataError("embeddings contain NaN or infinite values.", fix="check the model and its inputs.")
        faiss_index, used = _build_faiss(emb, opts)
        meta = {"kind": _kind_of(faiss_index), "requested_kind": opts.kind, "params": used, "metric": "inner_product"}
        meta.update(metadata or {})
        return cls(faiss_index, ids, metadata=meta, corpus=corpus)

    # -- the backend
    @classmethod
    def write(cls, target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: BaseModel,
              overwrite: bool = False, corpus: Any = None) -> str:
        check = ChunkChecker()
        ids: list[str] = []
        parts: list[np.ndarray] = []
        for chunk_ids, vectors in chunks:
            chunk_ids, vectors = check(chunk_ids, vectors)
            ids.extend(chunk_ids)
            parts.append(vectors)
        check.finish()
        cls.build(np.concatenate(parts), ids, kind=kind, metadata=meta, corpus=corpus,
                  **params.model_dump()).save(target)
        return target

    @classmethod
    def open(cls, location: str) -> DenseIndex:
        return cls.load(location)

    # -- searching
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, list[list[str]]]:
        q = self.queries(queries)
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise wrong_argument("DenseIndex.search", "k", k, "a whole number of hits", fix="pass k=10.")
        kk = min(int(k), len(self))
        if kk <= 0 or q.shape[0] == 0:
            return empty_hits(q.shape[0], kk)
        if self.kind == "hnsw" and self.index.hnsw.efSearch < kk:
            self.index.hnsw.efSearch = kk
        return self.hits(*self.index.search(q, kk))

    def sample_vectors(self, size: int, seed: int) -> np.ndarray | None:
        """Vectors of a seeded sample of ``min(size, len)`` rows (sorted row order); None when the index
        cannot reconstruct them (IVF without a direct map)."""
        n = len(self)
        if not n or size <= 0:
            return None
        rows = np.sort(np.random.default_rng(seed).choice(n, size=min(n, size), replace=False))
        try:
            return np.stack([self.index.reconstruct(int(r)) for r in rows])
        except Exception:  # noqa: BLE001 - IVF/PQ indexes may not reconstruct
            return None

    # -- persistence
    def save(self, directory: str | Path) -> None:
        """Write the index, ``ids.json``, ``meta.json`` (+ texts when held) atomically to ``directory``."""
        from drmix.io.atomic import atomic_dir
        from drmix.retrieval.exact import TorchFlatIndex

        path_argument("DenseIndex.save", "directory", directory, fix="pass the folder to write, e.g. 'runs/index'.")
        meta = {**self.metadata, "backend": BACKEND, "format_version": FORMAT_VERSION, "kind": self.kind,
                "dim": self.dim, "count": len(self), "has_texts": self.has_texts}
        with atomic_dir(directory) as tmp:
            if isinstance(self.index, TorchFlatIndex):
                np.save(tmp / VECTORS_FILE, self.index.vectors, allow_pickle=False)
            else:
                import faiss

                faiss.write_index(self.index, str(tmp / INDEX_FILE))
            (tmp / IDS_FILE).write_text(json_text(self.ids), encoding="utf-8")
            if self._corpus is not None:
                DocStore.write(tmp, self.ids, self._corpus)
            elif self._store is not None:
                self._store.copy_to(tmp)
            self.write_meta(tmp, meta, (VECTORS_FILE, INDEX_FILE))
        log.info("saved %s index of %d documents to %s", self.kind, len(self), directory)

    @classmethod
    def load(cls, directory: str | Path) -> DenseIndex:
        """Load an index saved by :meth:`save`; :class:`IndexLoadError` when missing, damaged or inconsistent."""
        directory = path_argument("DenseIndex.load", "directory", directory,
                                  fix="pass the --output folder of drmix index.").expanduser()
        meta = cls.opened_meta(directory, (IDS_FILE,))
        rebuild = cls.fix(directory, meta)
        if not (directory / VECTORS_FILE).is_file() and not (directory / INDEX_FILE).is_file():
            raise IndexLoadError(f"index directory has no {VECTORS_FILE} or {INDEX_FILE}.", path=directory,
                                 fix=rebuild)
        ids = read_json(directory / IDS_FILE, list, rebuild)
        faiss_index = _read_index(directory, rebuild)
        if faiss_index.ntotal != len(ids) or meta.get("count", len(ids)) != len(ids):
            raise IndexLoadError(f"index holds {faiss_index.ntotal} vectors but ids.json lists {len(ids)} ids "
                                 f"(meta.json says {meta.get('count')}).", path=directory, fix=rebuild)
        if meta.get("dim", faiss_index.d) != faiss_index.d:
            raise IndexLoadError(f"meta.json says dimension {meta.get('dim')}, the index has {faiss_index.d}.",
                                 path=directory, fix=rebuild)
        store = DocStore.open(directory, len(ids), rebuild)
        return cls(faiss_index, [str(i) for i in ids], metadata=meta, store=store, location=str(directory))


def _read_index(directory: Path, rebuild: str) -> Any:
    """The saved index: flat vectors for torch search, or a FAISS index (flat FAISS files become torch)."""
    from drmix.retrieval.exact import TorchFlatIndex

    if (directory / VECTORS_FILE).is_file():
        try:
            vectors = np.load(directory / VECTORS_FILE, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise IndexLoadError(f"cannot read {VECTORS_FILE} ({e}).", path=directory / VECTORS_FILE,
                                 fix=rebuild) from None
        if vectors.ndim != 2:
            raise IndexLoadError(f"{VECTORS_FILE} holds an array of shape {vectors.shape}, not [n, dim].",
                                 path=directory / VECTORS_FILE, fix=rebuild)
        return TorchFlatIndex(vectors)
    import faiss

    try:
        index = faiss.read_index(str(directory / INDEX_FILE))
    except RuntimeError as e:
        raise IndexLoadError(f"cannot read the FAISS index ({str(e).splitlines()[0][:160]}).",
                             path=directory / INDEX_FILE, fix=rebuild) from None
    if isinstance(index, faiss.IndexFlat):  # format 1 flat index: search it with torch
        return TorchFlatIndex(index.reconstruct_n(0, index.ntotal))
    return index


register_backend(BackendSpec(
    name=BACKEND, order=0, index=DenseIndex, kinds=("flat", "hnsw", "ivf"), target="folder", params=MemoryParams,
    example="runs/x/index",
    help="in RAM: exact torch search (flat) or FAISS HNSW / IVF, saved as a folder (the default)."))
