"""The ``faiss-disk`` backend: FAISS IVF-PQ or IVF-flat whose inverted lists live in a file, memory-mapped at
search, so an index larger than RAM is searched with little resident memory.

Built the way the FAISS wiki's "indexes that do not fit in RAM" recipe does (``faiss.contrib.ondisk``):

1. the chunks stream to ``vectors.f32`` on disk (float32 rows, never all in RAM);
2. the coarse quantiser (and the product quantiser) are trained on a seeded sample of ``train_size`` rows
   (:func:`train_rows`: 64 per list, but at least the 9,984 that the product quantiser's 256 centroids want --
   39 each -- and at most all), with FAISS's defaults otherwise (k-means of 10 iterations for the lists, 25 for
   each sub-quantiser on at most 256 points per centroid). Polysemous training, which ``index_factory`` turns on
   for ``PQ..x8`` and which reorders the PQ codes for Hamming-distance filtering drmix does not use, is off: it
   took about 90% of the training time (110 of 122 s for 10,000 384-d vectors, one thread);
3. the rows are added block by block (``chunk_size`` rows each) to copies of the trained index, each written
   to disk, and the blocks are merged into one ``lists.ivfdata`` (``OnDiskInvertedLists``).

At search ``index.faiss`` is read with ``IO_FLAG_ONDISK_SAME_DIR`` (the lists file is found beside it, so the
folder can be moved) and the lists are memory-mapped by ``OnDiskInvertedLists`` itself. (``IO_FLAG_MMAP`` is
not for such an index: it is ``IO_FLAG_SKIP_IVF_DATA | 0x646f0000``, meant to map the lists stored inside an
index file of ``ArrayInvertedLists``; on an ``OnDiskInvertedLists`` index its skip bit stops the reader from
mapping ``lists.ivfdata`` at all, and FAISS does not check that, so the first search dereferences a null
pointer: a segfault in FAISS 1.15.1, a missing check rather than a fault of the mapping.) IVF-PQ scores are approximate; with
``rerank`` > 0 the top ``rerank * k`` candidates are re-scored exactly from ``vectors.f32`` (the refinement
step of FAISS's ``IndexRefineFlat``, reading a few rows per query from disk with ``pread`` instead of holding
every vector in RAM). ``rerank 0`` deletes ``vectors.f32`` after the build (a smaller index, PQ
scores only).

Folder: ``index.faiss`` + ``lists.ivfdata`` (+ ``vectors.f32``) + ``ids.json`` + ``meta.json`` (``"backend":
"faiss-disk"``) + ``docs.jsonl`` / ``docs.offsets.npy`` when texts are stored; written atomically
(:func:`drmix.io.atomic.atomic_dir`: a build killed midway leaves the previous index or nothing). ``meta.json`` records
every file's size and a checksum of its ends and sampled blocks, checked before FAISS maps anything
(:mod:`drmix.retrieval.backends.folder`): a ``lists.ivfdata`` cut short is one line naming it, never a search
over missing lists (a wrong answer) or a mapping past the end of the file (SIGBUS). An index written before that
record is checked against the size its own header gives the lists file.
"""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from drmix.errors import ConfigError, IndexLoadError
from drmix.retrieval.backends.base import BackendSpec, ChunkChecker, Chunks, empty_hits, register_backend
from drmix.retrieval.backends.faiss_log import faiss_output_to_log
from drmix.retrieval.backends.folder import IDS_FILE, DocStore, FolderIndex, read_json

log = logging.getLogger(__name__)

BACKEND = "faiss-disk"
FORMAT_VERSION = 1
INDEX_FILE = "index.faiss"
LISTS_FILE = "lists.ivfdata"
VECTORS_FILE = "vectors.f32"
#: float32 values of candidate rows one search batch may gather for the exact re-scoring (16 MB; a batch of 1,024
#: queries at k 10, rerank 10 and 384 dimensions would otherwise gather 157 MB)
RESCORE_FLOATS = 4 * 2**20


class DiskParams(BaseModel):
    """The faiss-disk backend's parameters (``drmix index``'s flags of the same names)."""

    model_config = ConfigDict(extra="forbid")

    nlist: int | None = Field(None, ge=1, description="IVF: number of clusters (default 4*sqrt(n), at most n/39).")
    nprobe: int = Field(32, ge=1, description="IVF: clusters searched per query.")
    pq_m: int | None = Field(None, ge=1, description="ivf-pq: sub-quantisers, bytes per vector (default: the largest "
                                                     "divisor of the dimension <= dim/8, 48 for 384-d).")
    rerank: int = Field(10, ge=0, description="ivf-pq: re-score the top rerank*k PQ candidates exactly from the "
                                              "vectors kept on disk (0: PQ scores only, the vectors are not kept).")
    chunk_size: int = Field(100_000, ge=1, description="documents encoded and added per chunk (the vectors held in "
                                                       "RAM while building).")
    train_size: int | None = Field(None, ge=1, description="IVF: rows of the seeded training sample (default 64 "
                                                           "per list, at least 9,984, at most all).")


def pq_size(dim: int, wanted: int | None) -> int:
    """PQ sub-quantisers: ``wanted`` (must divide ``dim``), else the largest divisor of ``dim`` <= dim/8 (48 for
    384-d: 48 bytes per vector)."""
    if wanted is not None:
        if dim % wanted:
            raise ConfigError(f"--pq-m {wanted} does not divide the dimension {dim}.",
                              fix=f"pass a divisor of {dim}, e.g. {max(d for d in range(1, dim // 4 + 1) if dim % d == 0)}.")
        return wanted
    return max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)


def _nlist(n: int, wanted: int | None) -> int:
    want = wanted or max(1, int(4 * math.sqrt(n)))
    nlist = max(1, min(want, n // 39))  # FAISS k-means wants >= 39 training points per centroid
    if nlist < want:
        log.warning("IVF nlist lowered from %d to %d: %d vectors allow at most n/39 clusters", want, nlist, n)
    return nlist


#: training rows per IVF list (FAISS warns below 39 and samples down above 256); the product quantiser wants
#: 39 for each of its 256 centroids
TRAIN_PER_LIST, PQ_TRAIN_MIN = 64, 39 * 256


def train_rows(n: int, nlist: int, wanted: int | None = None) -> int:
    """Rows of the seeded training sample: ``wanted``, else ``64 * nlist`` but at least 9,984 (256 PQ centroids
    x 39); never more than ``n``."""
    return min(n, int(wanted or max(TRAIN_PER_LIST * nlist, PQ_TRAIN_MIN)))


def read_rows(path: Path, rows: np.ndarray, n: int, dim: int, step: int) -> np.ndarray:
    """The ``rows`` (sorted) of a float32 ``[n, dim]`` file, read ``step`` rows at a time (not memory-mapped: the
    pages of a mapping that gathered a sample spread over the whole file would stay resident, the whole file
    counted in the build's RSS)."""
    out = np.empty((len(rows), dim), dtype=np.float32)
    with open(path, "rb") as f:
        for start in range(0, n, step):
            lo, hi = np.searchsorted(rows, [start, start + step])
            if lo == hi:
                continue
            m = min(n, start + step) - start
            f.seek(start * dim * 4)
            block = np.fromfile(f, dtype=np.float32, count=m * dim).reshape(m, dim)
            np.take(block, rows[lo:hi] - start, axis=0, out=out[lo:hi])
            del block
    return out


def _trained(path: Path, n: int, dim: int, kind: str, p: DiskParams) -> tuple[Any, dict[str, Any]]:
    """The empty index of ``kind`` trained on a seeded sample of the ``n`` rows spooled at ``path``, and the
    parameters it was made with."""
    import faiss

    nlist = _nlist(n, p.nlist)
    train_size = train_rows(n, nlist, p.train_size)
    rows = np.sort(np.random.default_rng(0).choice(n, size=train_size, replace=False))
    used: dict[str, Any] = {"nlist": nlist, "nprobe": min(int(p.nprobe), nlist), "train_size": train_size}
    if kind == "ivf-pq":
        m = pq_size(dim, p.pq_m)
        nbits = int(min(8, max(1, math.floor(math.log2(max(2, train_size // 39))))))
        factory = f"IVF{nlist},PQ{m}x{nbits}"
        used.update(pq_m=m, pq_bits=nbits, rerank=int(p.rerank))
    else:
        factory = f"IVF{nlist},Flat"
        used.update(rerank=0)
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    ivf.cp.seed = 0
    if kind == "ivf-pq":
        ivf.do_polysemous_training = False  # see the module docstring: most of the training time, unused
        ivf.pq.cp.seed = 0
    log.info("training %s on %d of %d vectors", factory, train_size, n)
    sample = read_rows(path, rows, n, dim, int(p.chunk_size))
    with faiss_output_to_log():
        index.train(sample)
    return index, used


def _merged(index: Any, path: Path, n: int, dim: int, step: int, lists: Path) -> None:
    """Add the ``n`` spooled rows to copies of the trained ``index``, ``step`` rows a block, and merge the blocks
    into the on-disk inverted lists at ``lists``."""
    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    blocks = []
    for b, start in enumerate(range(0, n, step)):
        block = faiss.clone_index(index)
        rows_in = min(n, start + step) - start  # read, not mapped: the spool's pages do not stay resident
        part = np.fromfile(path, dtype=np.float32, count=rows_in * dim,
                           offset=start * dim * 4).reshape(rows_in, dim)
        block.add_with_ids(part, np.arange(start, start + rows_in, dtype=np.int64))
        del part
        blocks.append(str(path.parent / f".block{b}.index"))
        faiss.write_index(block, blocks[-1])
        del block
    with faiss_output_to_log():
        merge_ondisk(index, blocks, str(lists))
    for f in blocks:
        Path(f).unlink()


def _build(target: str, chunks: Chunks, meta: dict[str, Any], kind: str, p: DiskParams, corpus: Any = None) -> str:
    import faiss

    from drmix.io.atomic import atomic_dir

    check = ChunkChecker()
    ids: list[str] = []
    with atomic_dir(target) as tmp:
        with open(tmp / VECTORS_FILE, "wb") as spool:
            for chunk_ids, vectors in chunks:
                chunk_ids, vectors = check(chunk_ids, vectors)
                ids.extend(chunk_ids)
                spool.write(vectors.tobytes())
        check.finish()
        n, dim = check.count, int(check.dim or 0)
        index, used = _trained(tmp / VECTORS_FILE, n, dim, kind, p)
        _merged(index, tmp / VECTORS_FILE, n, dim, int(p.chunk_size), tmp / LISTS_FILE)
        faiss.write_index(index, str(tmp / INDEX_FILE))
        del index
        if not used["rerank"]:
            (tmp / VECTORS_FILE).unlink()
        (tmp / IDS_FILE).write_text(json.dumps(ids), encoding="utf-8")  # ASCII: lone surrogates round-trip
        if corpus is not None:
            DocStore.write(tmp, ids, corpus)
        full = {**meta, "backend": BACKEND, "format_version": FORMAT_VERSION, "kind": kind, "params": used,
                "metric": "inner_product", "dim": dim, "count": n, "has_texts": corpus is not None}
        DiskIndex.write_meta(tmp, full, (INDEX_FILE, LISTS_FILE, VECTORS_FILE))
    log.info("saved faiss-disk %s index of %d documents to %s", kind, n, target)
    return target


class DiskIndex(FolderIndex):
    """An on-disk FAISS IVF index opened for search."""

    backend = BACKEND

    @classmethod
    def write(cls, target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: BaseModel,
              overwrite: bool = False, corpus: Any = None) -> str:
        return _build(target, chunks, meta, kind, params, corpus)

    @classmethod
    def open(cls, location: str) -> DiskIndex:
        return cls(Path(location).expanduser())

    def __init__(self, directory: Path) -> None:
        import faiss

        self.directory = directory
        meta = self.opened_meta(directory, (INDEX_FILE, LISTS_FILE, IDS_FILE))
        rebuild = self.fix(directory, meta)
        if meta.get("backend") != BACKEND:
            raise IndexLoadError("not a faiss-disk index (meta.json is of another backend).", path=directory,
                                 fix=rebuild)
        try:
            with faiss_output_to_log():
                self.index = faiss.read_index(str(directory / INDEX_FILE), faiss.IO_FLAG_ONDISK_SAME_DIR)
        except RuntimeError as e:
            raise IndexLoadError(f"cannot read the FAISS index ({str(e).splitlines()[0][:160]}).",
                                 path=directory / INDEX_FILE, fix=rebuild) from None
        _check_lists(self.index, directory / LISTS_FILE, rebuild)
        self.index.nprobe = int(meta.get("params", {}).get("nprobe", 32))
        ids = [str(i) for i in read_json(directory / IDS_FILE, list, rebuild)]
        if len(ids) != self.index.ntotal:
            raise IndexLoadError(f"index holds {self.index.ntotal} vectors but {IDS_FILE} lists {len(ids)} ids.",
                                 path=directory, fix=rebuild)
        super().__init__(ids, meta, store=DocStore.open(directory, len(ids), rebuild), location=str(directory))
        self.rerank = int(meta.get("params", {}).get("rerank", 0))
        vec = directory / VECTORS_FILE
        # rows are read with pread, not memory-mapped: the kernel's read-ahead on a mapping would make most of
        # the file resident (and counted in RSS) after a few thousand random rows
        self.vectors = vec if vec.is_file() else None
        if self.vectors is not None and vec.stat().st_size != 4 * self.dim * len(self.ids):
            raise IndexLoadError(f"{VECTORS_FILE} holds {vec.stat().st_size} bytes, not {len(self.ids)} x {self.dim} "
                                 "float32 values.", path=vec, fix=rebuild)
        if self.rerank and self.vectors is None:
            raise IndexLoadError(f"index re-ranks from {VECTORS_FILE}, which is missing.", path=directory, fix=rebuild)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def set_nprobe(self, nprobe: int) -> None:
        self.index.nprobe = max(1, int(nprobe))

    def search(self, queries: np.ndarray, k: int, *, batch: int = 1024) -> tuple[np.ndarray, list[list[str]]]:
        q = self.queries(queries)
        kk = min(int(k), len(self))
        if kk <= 0 or q.shape[0] == 0:
            return empty_hits(q.shape[0], kk)
        out_s = np.full((q.shape[0], kk), -np.inf, dtype=np.float32)
        out_l = np.full((q.shape[0], kk), -1, dtype=np.int64)
        fetch = min(len(self), kk * self.rerank) if self.rerank else kk
        if self.rerank:  # the candidates' rows of a batch are gathered at once: keep them to RESCORE_FLOATS
            batch = max(1, min(batch, RESCORE_FLOATS // (fetch * self.dim)))
        for s in range(0, q.shape[0], batch):
            qb = q[s:s + batch]
            scores, labels = self.index.search(qb, fetch)
            if self.rerank:
                scores, labels = self._rescore(qb, labels)
            out_s[s:s + batch], out_l[s:s + batch] = scores[:, :kk], labels[:, :kk]
        return self.hits(out_s, out_l)

    def _rescore(self, q: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner products of the candidates (rows read from vectors.f32), best first."""
        valid = labels >= 0
        uniq, inverse = np.unique(np.where(valid, labels, 0), return_inverse=True)
        rows = self._rows(uniq)
        exact = np.einsum("qd,qkd->qk", q, rows[inverse.reshape(labels.shape)])
        exact[~valid] = -np.inf
        order = np.argsort(-exact, axis=1, kind="stable")
        return np.take_along_axis(exact, order, 1), np.where(np.take_along_axis(valid, order, 1),
                                                             np.take_along_axis(labels, order, 1), -1)

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows`` (sorted), read with one ``pread`` each."""
        size = 4 * self.dim
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        fd = os.open(self.vectors, os.O_RDONLY)
        try:
            for i, r in enumerate(rows.tolist()):
                out[i] = np.frombuffer(os.pread(fd, size, r * size), dtype=np.float32)
        finally:
            os.close(fd)
        return out

    def sample_vectors(self, size: int, seed: int) -> np.ndarray | None:
        """A seeded sample of the indexed vectors (None when ``vectors.f32`` was not kept)."""
        if self.vectors is None or not len(self):
            return None
        rows = np.sort(np.random.default_rng(seed).choice(len(self), size=min(len(self), size), replace=False))
        return self._rows(rows)


def _check_lists(index: Any, lists: Path, fix: str) -> None:
    """Refuse a lists file shorter than the size the index's header gives it (``OnDiskInvertedLists.totsize``): a
    search would read past its end (wrong hits, or SIGBUS through the mapping). Covers indexes built before
    ``meta.json`` recorded the files' sizes."""
    import faiss

    invlists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)
    want = int(getattr(invlists, "totsize", 0) or 0)
    size = lists.stat().st_size
    if size < want:
        raise IndexLoadError(f"{LISTS_FILE} holds {size} bytes, the index's lists need {want}: the file was cut "
                             "short.", path=lists, fix=fix)


register_backend(BackendSpec(
    name=BACKEND, order=10, index=DiskIndex, kinds=("ivf-pq", "ivf-flat"), target="folder", params=DiskParams,
    example="runs/x/index",
    help="FAISS IVF-PQ (default) or IVF-flat with on-disk inverted lists, memory-mapped at search; IVF-PQ "
         "candidates re-scored exactly from the vectors on disk (--rerank)."))
