"""The ``memory`` backend: :class:`~drmix.retrieval.index.DenseIndex` (exact torch search, FAISS HNSW or
IVF held in RAM), saved as a folder. The default of ``drmix index``; its files are those of earlier versions."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from drmix.retrieval.backends.base import BackendSpec, ChunkChecker, Chunks, register_backend


def _check(target: str, meta: dict[str, Any], overwrite: bool) -> None:
    """The folder is claimed by the command (drmix.outputs.check_output_dir) before encoding."""


def _build(target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: dict[str, Any],
           overwrite: bool, corpus: Any = None) -> str:
    from drmix.retrieval.index import DenseIndex

    check = ChunkChecker()
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for chunk_ids, vectors in chunks:
        chunk_ids, vectors = check(chunk_ids, vectors)
        ids.extend(chunk_ids)
        parts.append(vectors)
    check.finish()
    DenseIndex.build(np.concatenate(parts), ids, kind=kind, metadata=meta, corpus=corpus, **params).save(target)
    return target


def _open(location: str) -> Any:
    from drmix.retrieval.index import DenseIndex

    return DenseIndex.load(Path(location))


register_backend(BackendSpec(
    name="memory", order=0, kinds=("flat", "hnsw", "ivf"), claims=lambda loc: Path(loc).is_dir(),
    check=_check, build=_build, open=_open,
    help="in RAM: exact torch search (flat) or FAISS HNSW / IVF, saved as a folder (the default)."))
