"""A FAISS index of encoded documents, and search over it.

Encoding (texts to embeddings, length-sorted, tokenised once) is :mod:`drmix.retrieval.encode`.

* :class:`DenseIndex` wraps an inner-product index with the id map: ``flat`` (exact, default; searched
  with torch, on the GPU when present, see :mod:`drmix.retrieval.exact`), ``hnsw`` or ``ivf`` (FAISS,
  imported only for these). Saved as ``vectors.npy`` (flat) or ``index.faiss`` + ``ids.json`` +
  ``meta.json`` (plus ``docs.jsonl`` and ``docs.offsets.npy`` when the document texts are stored),
  written atomically. Flat indexes saved as ``index.faiss`` by earlier versions still load.
* Scores are inner products. When the model declares cosine similarity (the SentenceTransformer
  default), embeddings are L2-normalised so the inner product is the cosine; ``dot`` models are left
  as they are.

Document texts are stored *inside* the index directory (``docs.jsonl``, one ``{"_id", "title", "text"}``
line per indexed document in index order, with each line's byte offset in ``docs.offsets.npy``) so
``drmix search`` can show any hit's text with one seek, and an index stays usable when the corpus
file is moved, edited or deleted. Storing only offsets into the original corpus would save that
space (about the size of the corpus, comparable to the float32 vectors themselves) but silently show
wrong text once the corpus changes.
"""
from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drmix.errors import ConfigError, DataError, IndexLoadError, ModelError
from drmix.io.atomic import atomic_dir
from drmix.retrieval.encode import encode_texts, model_normalizes

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: flat indexes are vectors.npy searched with torch (1: index.faiss, still read)
INDEX_FILE = "index.faiss"
VECTORS_FILE = "vectors.npy"
IDS_FILE = "ids.json"
META_FILE = "meta.json"
DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "docs.offsets.npy"


def query_matrix(queries: np.ndarray, dim: int, metadata: Mapping[str, Any], what: str = "index") -> np.ndarray:
    """Query embeddings as a contiguous float32 ``[n, dim]`` matrix (one row for a vector); another dimension is
    refused naming the model the index (``what``) was built with. Shared by every index backend's search."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.shape[1] != dim:
        raise ModelError(f"query embeddings have dimension {q.shape[-1]}, the {what} has {dim}.",
                         fix=f"search with the model the index was built with ({metadata.get('model', '?')}).")
    return q


class IndexOptions(BaseModel):
    """FAISS index settings. Defaults follow the FAISS guidelines (HNSW M=32; IVF nlist ~ 4 sqrt(n))."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["flat", "hnsw", "ivf"] = "flat"
    M: int = Field(32, ge=2, description="HNSW: neighbours per node.")
    ef_construction: int = Field(200, ge=1, description="HNSW: candidate list size while building.")
    ef_search: int = Field(128, ge=1, description="HNSW: candidate list size while searching (raised to k).")
    nlist: int | None = Field(None, ge=1, description="IVF: number of clusters (default 4 sqrt(n)).")
    nprobe: int = Field(16, ge=1, description="IVF: clusters visited per query.")


# ----------------------------------------------------------------------------------------------- documents

class DocStore:
    """Stored document texts of an index (``docs.jsonl`` + ``docs.offsets.npy``), read by position."""

    def __init__(self, path: Path, offsets: np.ndarray) -> None:
        self.path = path
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    @staticmethod
    def write(directory: Path, ids: Sequence[str], corpus: Mapping[str, Mapping[str, str]]) -> None:
        """Write the texts of ``ids`` (in that order) into ``directory`` (called inside an atomic dir)."""
        offsets = np.empty(len(ids), dtype=np.int64)
        pos = 0
        with open(directory / DOCS_FILE, "wb") as f:
            for i, doc_id in enumerate(ids):
                doc = corpus.get(doc_id) or {}
                row = {"_id": doc_id, "title": doc.get("title", "") or "", "text": doc.get("text", "") or ""}
                data = (_json_text(row) + "\n").encode("utf-8")
                offsets[i] = pos
                f.write(data)
                pos += len(data)
        np.save(directory / OFFSETS_FILE, offsets, allow_pickle=False)

    @classmethod
    def open(cls, directory: Path, count: int) -> DocStore | None:
        path, opath = directory / DOCS_FILE, directory / OFFSETS_FILE
        if not path.exists() and not opath.exists():
            return None
        if not (path.exists() and opath.exists()):
            raise IndexLoadError(f"index has only one of {DOCS_FILE} and {OFFSETS_FILE}.", path=directory,
                                 fix="rebuild the index with drmix index.")
        try:
            offsets = np.load(opath, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise IndexLoadError(f"cannot read {OFFSETS_FILE} ({e}).", path=opath,
                                 fix="rebuild the index with drmix index.") from None
        if offsets.ndim != 1 or len(offsets) != count:
            raise IndexLoadError(f"{OFFSETS_FILE} has {offsets.size} entries for {count} indexed documents.",
                                 path=opath, fix="rebuild the index with drmix index.")
        return cls(path, offsets)

    def get(self, position: int) -> dict[str, str]:
        with open(self.path, "rb") as f:
            f.seek(int(self.offsets[position]))
            raw = f.readline()
        try:
            row = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            row = None
        if not isinstance(row, dict):
            raise IndexLoadError(f"{DOCS_FILE} is damaged or truncated (document #{position + 1} cannot be read).",
                                 path=self.path, fix="rebuild the index with drmix index.")
        return row

    def copy_to(self, directory: Path) -> None:
        shutil.copyfile(self.path, directory / DOCS_FILE)
        np.save(directory / OFFSETS_FILE, self.offsets, allow_pickle=False)


# ----------------------------------------------------------------------------------------------- index

def _build_faiss(embeddings: np.ndarray, opts: IndexOptions) -> tuple[Any, dict[str, Any]]:
    """Build and fill the index; returns it and the parameters actually used."""
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
    if opts.kind == "ivf":
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
        index.train(embeddings)
        index.add(embeddings)
        index.nprobe = min(opts.nprobe, nlist)
        return index, {"nlist": nlist, "nprobe": index.nprobe}
    raise ConfigError(f"unknown index kind {opts.kind!r}.", fix="use flat, hnsw or ivf.")


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


class DenseIndex:
    """A FAISS inner-product index plus the document id of each row (and optionally the texts)."""

    def __init__(self, faiss_index: Any, ids: list[str], *, metadata: dict[str, Any] | None = None,
                 corpus: Mapping[str, Mapping[str, str]] | None = None, store: DocStore | None = None) -> None:
        self.index = faiss_index
        self.ids = ids
        self.kind = _kind_of(faiss_index)
        self.metadata = dict(metadata or {})
        self._corpus = corpus
        self._store = store
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def has_texts(self) -> bool:
        return self._corpus is not None or self._store is not None

    # -- building
    @classmethod
    def build(cls, embeddings: np.ndarray, ids: Sequence[str], *, kind: str = "flat",
              metadata: dict[str, Any] | None = None, corpus: Mapping[str, Mapping[str, str]] | None = None,
              **params: Any) -> DenseIndex:
        """Index ``embeddings`` (row i is document ``ids[i]``). ``kind``: ``flat`` | ``hnsw`` | ``ivf``;
        ``params``: :class:`IndexOptions` fields (``M``, ``ef_construction``, ``ef_search``, ``nlist``,
        ``nprobe``). Pass ``corpus`` to store the documents' texts with the index."""
        try:
            opts = IndexOptions(kind=kind, **params)
        except ValidationError as e:
            err = e.errors()[0]
            raise ConfigError(f"invalid index option {'.'.join(map(str, err['loc']))}: {err['msg']}.",
                              fix="kind is flat, hnsw or ivf; options are M, ef_construction, ef_search, "
                                  "nlist, nprobe.") from None
        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
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

    # -- searching
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, list[list[str]]]:
        """Top ``k' = min(k, len(self))`` documents per query row: scores ``[n, k']`` (descending) and ids.

        Approximate indexes (IVF with few clusters probed) can return fewer than ``k'`` hits for a query;
        its id list is then shorter and the missing score slots hold ``-inf``.
        """
        q = query_matrix(queries, self.dim, self.metadata)
        kk = min(int(k), len(self))
        if kk <= 0 or q.shape[0] == 0:
            return np.zeros((q.shape[0], max(kk, 0)), dtype=np.float32), [[] for _ in range(q.shape[0])]
        if self.kind == "hnsw" and self.index.hnsw.efSearch < kk:
            self.index.hnsw.efSearch = kk
        scores, labels = self.index.search(q, kk)
        ids: list[list[str]] = []
        for row_scores, row in zip(scores, labels):
            valid = row >= 0
            if not valid.all():
                row_scores[~valid] = -np.inf
            ids.append([self.ids[j] for j in row[valid]])
        return scores, ids

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

    # -- documents
    def position(self, doc_id: str) -> int | None:
        if self._positions is None:
            self._positions = {d: i for i, d in enumerate(self.ids)}
        return self._positions.get(doc_id)

    def doc(self, doc_id: str) -> dict[str, str] | None:
        """``{"title", "text"}`` of an indexed document when the index stores texts, else ``None``."""
        if self._corpus is not None:
            doc = self._corpus.get(doc_id)
            return dict(doc) if doc is not None else None
        pos = self.position(doc_id)
        if self._store is None or pos is None:
            return None
        row = self._store.get(pos)
        return {"title": row.get("title", ""), "text": row.get("text", "")}

    # -- persistence
    def save(self, directory: str | Path) -> None:
        """Write the index, ``ids.json``, ``meta.json`` (+ texts when held) atomically to ``directory``."""
        from drmix.retrieval.exact import TorchFlatIndex

        meta = {**self.metadata, "format_version": FORMAT_VERSION, "kind": self.kind, "dim": self.dim,
                "count": len(self), "has_texts": self.has_texts}
        with atomic_dir(directory) as tmp:
            if isinstance(self.index, TorchFlatIndex):
                np.save(tmp / VECTORS_FILE, self.index.vectors, allow_pickle=False)
            else:
                import faiss

                faiss.write_index(self.index, str(tmp / INDEX_FILE))
            (tmp / IDS_FILE).write_text(_json_text(self.ids), encoding="utf-8")
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            if self._corpus is not None:
                DocStore.write(tmp, self.ids, self._corpus)
            elif self._store is not None:
                self._store.copy_to(tmp)
        log.info("saved %s index of %d documents to %s", self.kind, len(self), directory)

    @classmethod
    def load(cls, directory: str | Path) -> DenseIndex:
        """Load an index saved by :meth:`save`; :class:`IndexLoadError` when missing or inconsistent."""
        directory = Path(directory).expanduser()
        rebuild = "rebuild it with drmix index --corpus ... --output DIR."
        if not directory.is_dir():
            raise IndexLoadError("index directory not found.", path=directory,
                                 fix="pass the --output of drmix index, or " + rebuild)
        for name in (IDS_FILE, META_FILE):
            if not (directory / name).is_file():
                raise IndexLoadError(f"index directory has no {name}.", path=directory, fix=rebuild)
        if not (directory / VECTORS_FILE).is_file() and not (directory / INDEX_FILE).is_file():
            raise IndexLoadError(f"index directory has no {VECTORS_FILE} or {INDEX_FILE}.", path=directory,
                                 fix=rebuild)
        meta = _read_json(directory / META_FILE, dict, rebuild)
        ids = _read_json(directory / IDS_FILE, list, rebuild)
        faiss_index = _read_index(directory, rebuild)
        if faiss_index.ntotal != len(ids) or meta.get("count", len(ids)) != len(ids):
            raise IndexLoadError(f"index holds {faiss_index.ntotal} vectors but ids.json lists {len(ids)} ids "
                                 f"(meta.json says {meta.get('count')}).", path=directory, fix=rebuild)
        if meta.get("dim", faiss_index.d) != faiss_index.d:
            raise IndexLoadError(f"meta.json says dimension {meta.get('dim')}, the index has {faiss_index.d}.",
                                 path=directory, fix=rebuild)
        store = DocStore.open(directory, len(ids))
        return cls(faiss_index, [str(i) for i in ids], metadata=meta, store=store)


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


def _json_text(value: Any) -> str:
    """JSON with non-ASCII characters as they are; a value holding a lone surrogate (which UTF-8 cannot encode)
    is written with ``\\u`` escapes instead, so its ids and texts round-trip."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)
    return text


def _counts(items: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    return counts


def _read_json(path: Path, kind: type, fix: str) -> Any:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IndexLoadError(f"cannot parse {path.name} ({e}).", path=path, fix=fix) from None
    if not isinstance(value, kind):
        raise IndexLoadError(f"{path.name} should hold a JSON {kind.__name__}.", path=path, fix=fix)
    return value


# ----------------------------------------------------------------------------------------------- pipelines

def model_name(model: Any) -> str:
    """Best-effort name of a loaded model (the folder or hub id it was loaded from)."""
    try:
        return str(model[0].auto_model.config._name_or_path)
    except (AttributeError, IndexError, TypeError, KeyError):
        return type(model).__name__


def index_corpus(model: Any, corpus: Mapping[str, Mapping[str, str]], *, kind: str = "flat", batch_size: int = 64,
                 max_length: int | None = None, show_progress: bool = True, store_texts: bool = True,
                 metadata: dict[str, Any] | None = None, precision: str | None = "auto",
                 cache_ids: bool = False, **params: Any) -> DenseIndex:
    """Encode every document (``title + " " + text`` with the model's document prompt) into an index.

    ``metadata`` is merged into ``meta.json`` (drmix index records the model and corpus paths there);
    ``store_texts`` keeps the texts so the saved index can show them; ``cache_ids`` keeps the corpus's
    token ids on disk for the next model with the same tokenizer (:func:`~drmix.retrieval.encode.encode_texts`).
    """
    from drmix.data.beir import doc_text
    from drmix.model.encoder import document_prompt

    if not corpus:
        raise DataError("the corpus is empty.", fix="index a corpus with at least one document.")
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
    document, encoded by ``model`` with its document prompt), e.g. merged from sharded encoding."""
    from drmix.model.encoder import document_prompt

    meta = {"model": model_name(model), "normalized": model_normalizes(model),
            "document_prompt": document_prompt(model), "precision": precision,
            "max_length": max_length or getattr(model, "max_seq_length", None)}
    meta.update(metadata or {})
    return DenseIndex.build(embeddings, list(corpus), kind=kind, metadata=meta,
                            corpus=corpus if store_texts else None, **params)


def search_queries(model: Any, index: DenseIndex, queries: Mapping[str, str], k: int = 100, *,
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
