"""Matryoshka evaluation: every metric at truncated, re-normalised embedding sizes (DRAMA Appendix B;
Kusupati et al., 2022).

A Matryoshka-trained model front-loads information, so its first ``d`` coordinates are an embedding on their
own: ``e_d = e[:d] / ||e[:d]||``. The corpus and the queries are encoded once at full size; each size
then gets its own exact inner-product index over the truncated, re-normalised vectors. Metrics at size ``d``
are reported under ``"<metric>@<d>d"`` (``ndcg@10@256d``) next to the full-size ones.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from drmix.errors import ConfigError

log = logging.getLogger(__name__)


def dim_suffix(metric: str, dim: int) -> str:
    return f"{metric}@{dim}d"


def parse_dims(text: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"64,128,256"`` -> ``(64, 128, 256)``; sizes must be positive."""
    if text is None or text == "":
        return ()
    try:
        dims = [int(x) for x in text.split(",") if x.strip()] if isinstance(text, str) else [int(x) for x in text]
    except ValueError:
        raise ConfigError(f"cannot read --dims {text!r}.", fix="write sizes separated by commas, e.g. 64,128,256.") from None
    if any(d < 1 for d in dims):
        raise ConfigError(f"--dims {dims} holds a size below 1.", fix="pass positive sizes, e.g. 64,128,256.")
    return tuple(sorted(set(dims)))


def truncate_normalize(emb: np.ndarray, dim: int) -> np.ndarray:
    """The first ``dim`` columns of each row, L2-normalised (rows of zeros stay zero)."""
    out = np.ascontiguousarray(emb[:, :dim], dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


def evaluate_dims(model: Any, corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str],
                  qrels: Mapping[str, Mapping[str, int]], dims: Sequence[int], *, k: int = 100, batch_size: int = 64,
                  metrics: Sequence[str], query_prompt: str | None = None, max_length: int | None = None,
                  show_progress: bool = False, per_query: bool = False,
                  precision: str | None = "auto") -> dict[str, Any]:
    """Full-size metrics plus each metric at every size in ``dims`` (sizes above the model's are skipped with
    a warning). ``per_query=True`` returns ``{query_id: {metric: value}}`` instead of the means."""
    from drmix.data.beir import doc_text
    from drmix.evaluation.metrics import evaluate_run
    from drmix.model.encoder import document_prompt, query_prompt as model_query_prompt
    from drmix.retrieval.encode import encode_texts, model_normalizes
    from drmix.retrieval.index import DenseIndex
    from drmix.retrieval.shards import encode_corpus  # in shards under torchrun (drmix eval)

    ids = list(corpus)
    qids = list(queries)
    norm = model_normalizes(model)
    d_emb = encode_corpus(model, [doc_text(corpus[i]) for i in ids], batch_size=batch_size,
                          prompt=document_prompt(model), max_length=max_length, show_progress=show_progress,
                          precision=precision)
    qp = model_query_prompt(model) if query_prompt is None else query_prompt
    q_emb = encode_texts(model, [queries[q] for q in qids], batch_size=batch_size, prompt=qp, max_length=max_length,
                         precision=precision)

    def run_at(dim: int | None) -> dict[str, dict[str, float]]:
        if dim is None:
            d, q = d_emb, q_emb
            if norm:
                d, q = truncate_normalize(d, d.shape[1]), truncate_normalize(q, q.shape[1])
        else:
            d, q = truncate_normalize(d_emb, dim), truncate_normalize(q_emb, dim)
        index = DenseIndex.build(d, ids, kind="flat")
        scores, hits = index.search(q, k)
        return {qid: {h: float(s) for h, s in zip(row_ids, row_s)} for qid, row_ids, row_s in zip(qids, hits, scores)}

    def score(run: dict[str, dict[str, float]], dim: int | None) -> dict[str, Any]:
        res = evaluate_run(qrels, run, metrics, per_query=per_query)
        if dim is None:
            return res
        if per_query:
            return {qid: {dim_suffix(m, dim): v for m, v in row.items()} for qid, row in res.items()}
        return {dim_suffix(m, dim): v for m, v in res.items()}

    out = score(run_at(None), None)
    full = d_emb.shape[1]
    for dim in dims:
        if dim > full:
            log.warning("--dims %d exceeds the model's %d dimensions; skipped", dim, full)
            continue
        res = score(run_at(dim), dim)
        if per_query:
            for qid, row in res.items():
                out.setdefault(qid, {}).update(row)
        else:
            out.update(res)
    return out
