"""``drmix eval --index``: score a built index (any backend) against a BEIR split's relevance judgements.

The queries are encoded with the model the index records (or ``--model``, checked against the index's
fingerprint), searched through the index's backend, and the run is scored with the same metrics as ``drmix
eval`` (:func:`drmix.evaluation.metrics.evaluate_run`). Comparing an approximate index (IVF-PQ, HNSW, a Milvus
collection) with ``drmix eval`` of the same model (exact search) measures the recall the approximation costs.

An index built from another corpus than the qrels judge scores 0 without being wrong about anything: the judged
documents it does not hold are counted (``info["judged_not_indexed"]``) and named in a warning -- every one of
them missing almost always means the wrong ``--data`` or the wrong index.
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
    missing = judged_not_indexed(index, data.qrels, location, data.root / "qrels" / f"{split}.tsv")
    run = search_queries(model, index, data.queries, k=k, batch_size=batch_size, prompt=prompt,
                         precision=precision)
    values = evaluate_run(data.qrels, run, metrics, per_query=True)
    n = len(values)
    means = {m: sum(v[m] for v in values.values()) / n for m in next(iter(values.values()))} if n else {}
    meta = getattr(index, "metadata", {}) or {}
    info = {"queries": len(data.queries), "documents": len(index), "seconds": round(time.perf_counter() - t0, 2),
            "path": str(data_dir), "index": location, "backend": getattr(index, "backend", None) or meta.get("backend"),
            "kind": meta.get("kind"), "params": meta.get("params", {}), "judged_not_indexed": missing}
    log.info("%s via %s: %s", name, location, ", ".join(f"{m}={v:.4f}" for m, v in means.items()))
    return EvalReport(model=model_name or str(meta.get("model", "?")), split=split, results={name: means},
                      info={name: info}, per_query={name: values})


def judged_not_indexed(index: Any, qrels: Mapping[str, Mapping[str, int]], location: str, qrels_file: Path) -> int:
    """How many of the documents ``qrels`` judge relevant the index does not hold; a warning when any is missing
    (every one: the index and the qrels are of different corpora, and every score is 0)."""
    judged = {d for docs in qrels.values() for d, rel in docs.items() if rel > 0}
    if not judged:
        return 0
    missing = len(judged) - len(index.holds(judged))
    if missing == len(judged):
        log.warning("none of the %d documents judged relevant in %s is in the index at %s: every score is 0 (is the "
                    "index built from this dataset's corpus?)", len(judged), qrels_file, location)
    elif missing:
        log.warning("%d of the %d documents judged relevant in %s are not in the index at %s: they count as not "
                    "retrieved", missing, len(judged), qrels_file, location)
    return missing
