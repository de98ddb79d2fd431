"""Exact inner-product search with torch: chunked top-k over the embedding matrix, on the GPU when present.

For exact (flat) search FAISS adds nothing a matrix product and ``torch.topk`` do not: the scores of
a block of queries against a chunk of the corpus are one GEMM, and the top k of the whole corpus is
the top k of the per-chunk top k's (merged as chunks stream by, so memory stays
``queries x chunk`` whatever the corpus size). On a GPU this runs where the embeddings already are;
on CPU it is the same BLAS GEMM FAISS's ``IndexFlatIP`` calls. ``faiss`` is therefore imported only
for the approximate index types (HNSW, IVF) that need it.

:class:`TorchFlatIndex` mirrors the part of the ``faiss.Index`` interface drmix uses (``ntotal``,
``d``, ``search``, ``reconstruct``), so a :class:`~drmix.retrieval.index.DenseIndex` holds either.
Ties are broken towards the lower row (as FAISS's flat index does), by a stable sort of each merge.
"""
from __future__ import annotations

import numpy as np
import torch

QUERY_BLOCK = 1024  # queries scored together
CORPUS_CHUNK = 65536  # corpus rows per GEMM: a [1024 x 65536] fp32 score block is 256 MiB


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def topk_inner_product(queries: torch.Tensor, corpus: torch.Tensor, k: int, *,
                       chunk: int = CORPUS_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top ``k`` rows of ``corpus`` by inner product for each query: (scores, rows), descending."""
    n = corpus.size(0)
    k = min(k, n)
    best_s = queries.new_full((queries.size(0), 0), float("-inf"))
    best_i = torch.zeros((queries.size(0), 0), dtype=torch.long, device=queries.device)
    for start in range(0, n, chunk):
        block = corpus[start:start + chunk]
        scores = queries @ block.T
        kk = min(k, block.size(0))
        s, i = torch.topk(scores, kk, dim=1)
        cand_s = torch.cat([best_s, s], dim=1)
        cand_i = torch.cat([best_i, i + start], dim=1)
        # order by score descending, then by row ascending (stable sort on rows sorted ascending first)
        by_row = torch.argsort(cand_i, dim=1)
        cand_s, cand_i = cand_s.gather(1, by_row), cand_i.gather(1, by_row)
        order = torch.sort(cand_s, dim=1, descending=True, stable=True).indices[:, :k]
        best_s, best_i = cand_s.gather(1, order), cand_i.gather(1, order)
    return best_s, best_i


class TorchFlatIndex:
    """Exact inner-product index over float32 vectors, searched with torch (GPU when available)."""

    def __init__(self, vectors: np.ndarray, *, device: torch.device | str | None = None) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.device = torch.device(device) if device is not None else default_device()
        self._on_device: torch.Tensor | None = None

    @property
    def ntotal(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def d(self) -> int:
        return int(self.vectors.shape[1])

    def reconstruct(self, row: int) -> np.ndarray:
        return self.vectors[int(row)].copy()

    def _matrix(self) -> torch.Tensor:
        if self._on_device is None:
            self._on_device = torch.from_numpy(self.vectors).to(self.device)
        return self._on_device

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` per query row: float32 scores ``[n, k]`` and int64 rows ``[n, k]`` (like FAISS)."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        matrix = self._matrix()
        scores = np.empty((q.shape[0], min(k, self.ntotal)), dtype=np.float32)
        rows = np.empty(scores.shape, dtype=np.int64)
        with torch.inference_mode():
            for start in range(0, q.shape[0], QUERY_BLOCK):
                qt = torch.from_numpy(q[start:start + QUERY_BLOCK]).to(self.device)
                s, i = topk_inner_product(qt, matrix, k)
                scores[start:start + len(qt)] = s.cpu().numpy()
                rows[start:start + len(qt)] = i.cpu().numpy()
        return scores, rows
