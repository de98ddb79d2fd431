"""Many models on the same BEIR test sets, cached: the evaluation every recipe, the demo and the benchmarks share.

:func:`evaluate_suite` loads (and subsamples, seeded) the datasets once, evaluates each model that has no
valid cache with :func:`drmix.evaluation.evaluate.evaluate_dataset` (exact search, pytrec_eval metrics,
optionally Matryoshka ``dims``) and writes one cache file per model, ``<folder>/<kind>-<split>.json``
(:func:`cache_file`), holding the key of the evaluation (datasets, split, caps, seed, lengths, metrics, dims,
model, the content digests of the test sets' files, :func:`data_stamp`, and of a local model folder's files,
:func:`model_stamp`), the per-dataset means and the
per-query scores. The file is what ``drmix compare`` reads, so any two evaluated models of any recipe can be
compared with paired tests. A cache whose key differs (another model, split, cap ...) is recomputed and
replaced atomically.

:func:`results_table` is the one Markdown table of such results: a row per dataset (and per metric when
there are several), a column per model, optionally the difference to a baseline column, an average row
and the share of one column in another (the DRAMA student / teacher).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drmix.io.atomic import atomic_write_json

log = logging.getLogger(__name__)

Results = dict[str, dict[str, dict[str, float]]]         # label -> dataset -> metric -> mean
PerQuery = dict[str, dict[str, dict[str, dict[str, float]]]]  # label -> dataset -> query id -> metric -> value


@dataclass
class SuiteResult:
    results: Results = field(default_factory=dict)
    per_query: PerQuery = field(default_factory=dict)
    cache_files: dict[str, Path] = field(default_factory=dict)

    def scores(self, metric: str = "ndcg@10") -> dict[str, dict[str, dict[str, float]]]:
        """``{label: {dataset: {query_id: value}}}`` of one metric."""
        return {lb: {d: {q: v[metric] for q, v in qs.items()} for d, qs in by.items()}
                for lb, by in self.per_query.items()}


def cache_file(folder: str | Path, split: str, kind: str = "eval") -> Path:
    """The cache of one model's evaluation: ``<folder>/<kind>-<split>.json`` (``kind``: eval, select, ...)."""
    return Path(folder) / f"{kind}-{split}.json"


def model_stamp(model: Any) -> str | None:
    """The content digest of a local model folder (every file's full hash, :func:`drmix.provenance.fingerprint`;
    remembered by path, size, modification and change time and inode, so an unchanged folder is not read
    again), so a cache made with an earlier model saved at the same path (a stage trained again, a folder
    replaced) is not reused; None for anything else (a hub id, a loaded encoder)."""
    from drmix.provenance import fingerprint

    if not isinstance(model, (str, Path)) or not Path(model).is_dir():
        return None
    return fingerprint(model)["digest"]


def data_stamp(test_data: Sequence[str | Path], split: str) -> list[str | None]:
    """The content digest of each BEIR set as ``split`` reads it (corpus, queries, ``qrels/<split>``), so a set
    edited at the same path (queries cut, qrels changed) is evaluated again (:func:`drmix.provenance.beir_fingerprint`)."""
    from drmix.provenance import beir_fingerprint

    return [(fp or {}).get("digest") for fp in (beir_fingerprint(d, split) for d in test_data)]


def _load_model(model: Any, device: str | None):
    from drmix.model.encoder import load_encoder

    if model is None or (isinstance(model, str) and model == "default"):
        return load_encoder(None, device=device)
    return load_encoder(str(model), device=device) if isinstance(model, (str, Path)) else model


def evaluate_suite(models: Mapping[str, Any], test_data: Sequence[str | Path], *,
                   cache_dirs: Mapping[str, str | Path] | None = None, kind: str = "eval", split: str = "test",
                   max_queries: int | None = None, max_docs: int | None = None, seed: int = 0,
                   max_length: int | None = None, metrics: Sequence[str] | None = None, dims: Sequence[int] = (),
                   show_progress: bool = False, device: str | None = None,
                   query_instructions: Mapping[str, str] | None = None) -> SuiteResult:
    """Evaluate ``{label: model}`` (a folder, a hub id, ``None``/``"default"`` for the bundled model, or a
    loaded encoder) on ``test_data`` (BEIR directories).

    ``cache_dirs[label]`` is the folder of that model's cache file (default: the parent of a model folder,
    i.e. its run folder; a loaded encoder without a cache folder is not cached). ``query_instructions``: a
    query prompt per dataset name (see :func:`drmix.evaluation.evaluate.evaluate_dataset`).
    """
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import dataset_names, evaluate_dataset, subsample
    from drmix.evaluation.metrics import DEFAULT_METRICS
    from drmix.retrieval.shards import writes_here

    metrics = tuple(metrics or DEFAULT_METRICS)
    key = {"split": split, "data": [str(Path(d).resolve()) for d in test_data], "max_queries": max_queries,
           "max_docs": max_docs, "seed": seed, "max_length": max_length, "metrics": list(metrics),
           "dims": list(dims), "data_files": data_stamp(test_data, split),
           **({"query_instructions": dict(query_instructions)} if query_instructions else {})}
    out = SuiteResult()
    datasets = None
    for label, model in models.items():
        folder = (cache_dirs or {}).get(label)
        if folder is None and isinstance(model, (str, Path)) and Path(model).is_dir():
            folder = Path(model).parent
        name = ("default" if model is None else str(model) if isinstance(model, (str, Path))
                else getattr(model, "name", label))
        cache = cache_file(folder, split, kind) if folder is not None else None
        model_key = {**key, "model": name, "model_files": model_stamp(model)}
        if cache is not None and cache.exists():
            try:
                cached = json.loads(cache.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                cached = {}
            if cached.get("key") == model_key and cached.get("per_query"):
                out.results[label], out.per_query[label], out.cache_files[label] = (
                    cached["results"], cached["per_query"], cache)
                continue
        if datasets is None:
            datasets = {n: subsample(load_beir(d, split), max_queries=max_queries, max_docs=max_docs, seed=seed)
                        for n, d in zip(dataset_names(test_data), test_data)}
        encoder = _load_model(model, device)
        pq: dict[str, dict] = {n: {} for n in datasets}
        out.results[label] = {n: evaluate_dataset(encoder, data, metrics=metrics, max_length=max_length,
                                                  dims=tuple(dims), show_progress=show_progress, per_query=pq[n],
                                                  query_instructions=query_instructions)
                              for n, data in datasets.items()}
        out.per_query[label] = pq
        if cache is not None and writes_here():  # under torchrun: rank 0 writes
            atomic_write_json(cache, {"key": model_key, "model": name, "split": split,
                                      "results": out.results[label], "per_query": pq})
            out.cache_files[label] = cache
        log.info("%s: %s", label, {n: round(r.get("ndcg@10", float("nan")), 4) for n, r in out.results[label].items()})
    return out


def results_table(results: Results, metrics: Sequence[str] = ("ndcg@10",), *, deltas: bool = True,
                  average: bool = True, share: tuple[str, str] | None = None) -> str:
    """Markdown: a row per dataset (per dataset and metric when several metrics), a column per model label.

    ``deltas``: cells of the other columns also show the difference to the first column. ``average``: a last
    row with the unweighted mean over datasets (when there are several and every model has them all).
    ``share=(num, den)``: a last column ``num / den`` as a percentage (e.g. student / teacher).
    """
    from drmix.markdown import md_cell

    labels = list(results)
    datasets = list(dict.fromkeys(d for r in results.values() for d in r))
    base = labels[0]
    by_metric = len(metrics) > 1 or share is not None

    def cell(label: str, value: float | None, ref: float | None) -> str:
        if value is None:
            return ""
        if not deltas or label == base or ref is None:
            return f"{value:.4f}"
        return f"{value:.4f} ({value - ref:+.4f})"

    def row(name: str, metric: str, values: dict[str, float | None]) -> str | None:
        if all(v is None for v in values.values()):
            return None
        cells = [cell(lb, values[lb], values[base]) for lb in labels]
        if share is not None:
            num, den = values.get(share[0]), values.get(share[1])
            cells.append(f"{num / den:.1%}" if den and num is not None else "")
        return (f"| {md_cell(name)} | {md_cell(metric)} | " if by_metric else f"| {md_cell(name)} | ") \
            + " | ".join(cells) + " |"

    extra = [f"{share[0]} / {share[1]}"] if share is not None else []
    if by_metric:
        lines = ["| dataset | metric | " + " | ".join(map(md_cell, labels + extra)) + " |",
                 "|---|---|" + "---:|" * (len(labels) + len(extra))]
    else:
        lines = [f"| {md_cell(metrics[0])} | " + " | ".join(map(md_cell, labels)) + " |",
                 "|---|" + "---:|" * len(labels)]
    for d in datasets:
        for m in metrics:
            line = row(d, m, {lb: results[lb].get(d, {}).get(m) for lb in labels})
            if line is not None:
                lines.append(line)
    if average and len(datasets) > 1:
        for m in metrics:
            avgs: dict[str, float | None] = {}
            for lb in labels:
                vals = [results[lb][d][m] for d in datasets if m in results[lb].get(d, {})]
                avgs[lb] = sum(vals) / len(vals) if len(vals) == len(datasets) and vals else None
            line = row("average", m, avgs)
            if line is not None:
                lines.append(line)
    return "\n".join(lines) + "\n"
