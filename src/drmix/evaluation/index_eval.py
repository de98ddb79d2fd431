"""``drmix eval --index``: score a built index (any backend) against a BEIR split's relevance judgements.

The queries are encoded with the model the index records (or ``--model``, checked against the index's
fingerprint), searched through the index's backend, and the run is scored with the same metrics as ``drmix
eval`` (:func:`drmix.evaluation.metrics.evaluate_run`). Comparing an approximate index (IVF-PQ, HNSW, a Milvus
collection) with ``drmix eval`` of the same model (exact search) measures the recall the approximation costs.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.data.beir import load_beir
from drmix.evaluation.evaluate import EvalReport, _check_k, dataset_names
from drmix.evaluation.metrics import DEFAULT_METRICS, evaluate_run
from drmix.retrieval.index import search_queries

log = logging.getLogger(__name__)


def evaluate_index(model: Any, index: Any, location: str, data_dir: str | Path, *, split: str = "test",
                   k: int = 100, batch_size: int = 64, metrics: Sequence[str] = DEFAULT_METRICS,
                   precision: str | None = "auto", model_name: str = "",
                   query_instructions: Mapping[str, str] | None = None) -> EvalReport:
    """Retrieve the split's queries from ``index`` (opened at ``location``) with ``model`` and score the run."""
    from drmix.model.instructions import query_prompt_for

    metrics = tuple(metrics)
    _check_k(k, metrics)
    t0 = time.perf_counter()
    name = dataset_names([data_dir])[0]
    data = load_beir(data_dir, split)
    prompt = query_prompt_for(model, data.name, instructions=query_instructions)
    run = search_queries(model, index, data.queries, k=k, batch_size=batch_size, prompt=prompt,
                         precision=precision)
    values = evaluate_run(data.qrels, run, metrics, per_query=True)
    n = len(values)
    means = {m: sum(v[m] for v in values.values()) / n for m in next(iter(values.values()))} if n else {}
    meta = getattr(index, "metadata", {}) or {}
    info = {"queries": len(data.queries), "documents": len(index), "seconds": round(time.perf_counter() - t0, 2),
            "path": str(data_dir), "index": location, "backend": meta.get("backend", "memory"),
            "kind": meta.get("kind"), "params": meta.get("params", {})}
    log.info("%s via %s: %s", name, location, ", ".join(f"{m}={v:.4f}" for m, v in means.items()))
    return EvalReport(model=model_name or str(meta.get("model", "?")), split=split, results={name: means},
                      info={name: info}, per_query={name: values})
