"""Evaluate a model on BEIR directories, and the dev-set evaluator the trainer runs every N steps.

For each dataset: encode the corpus into an exact inner-product index (:func:`index_corpus`), retrieve
the top ``k`` documents for every query of the split (:func:`search_queries`, the model's query prompt)
and score the run with :func:`drmix.evaluation.metrics.evaluate_run` (pytrec_eval). The ``average``
row is the unweighted mean over datasets (each dataset counts once, as in BEIR's tables).
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.data.beir import BeirDataset, available_splits, load_beir
from drmix.evaluation.metrics import DEFAULT_METRICS, evaluate_run, parse_metric
from drmix.retrieval.index import index_corpus, model_name, search_queries

log = logging.getLogger(__name__)

AVERAGE = "average"


@dataclass
class EvalReport:
    """Scores of one model on one or more datasets: ``results[dataset][metric]``."""

    model: str
    split: str
    results: dict[str, dict[str, float]]
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataset -> queries, documents, seconds
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # dataset -> qid -> metric

    @property
    def metrics(self) -> list[str]:
        names: list[str] = []
        for row in self.results.values():
            names.extend(m for m in row if m not in names)
        return names

    def average(self) -> dict[str, float]:
        """Unweighted mean of each metric over the datasets that report it."""
        out: dict[str, float] = {}
        for m in self.metrics:
            values = [row[m] for row in self.results.values() if m in row]
            out[m] = sum(values) / len(values)
        return out

    def rows(self) -> list[tuple[str, dict[str, float]]]:
        """Per-dataset rows then the average row (only when there are several datasets)."""
        rows = list(self.results.items())
        if len(self.results) > 1:
            rows.append((AVERAGE, self.average()))
        return rows

    def label(self, name: str) -> str:
        """The dataset's name in a table: with its sample's size when the evaluation was sampled
        (:func:`sample_label`)."""
        if name == AVERAGE and any("subsample" in i for i in self.info.values()):
            return f"{AVERAGE} (of samples)"
        return sample_label(name, self.info.get(name))

    def to_markdown(self) -> str:
        metrics = self.metrics
        from drmix.markdown import md_cell, md_code

        lines = [f"Model: {md_code(self.model)} — split: {md_code(self.split)}", "",
                 "| dataset | " + " | ".join(map(md_cell, metrics)) + " |", "|---|" + "---:|" * len(metrics)]
        for name, row in list(self.results.items()) + [(AVERAGE, self.average())]:
            lines.append(f"| {md_cell(self.label(name))} | " + " | ".join(_fmt(row.get(m)) for m in metrics) + " |")
        samples = [i["subsample"] for i in self.info.values() if isinstance(i.get("subsample"), Mapping)]
        if samples and all("of_documents" not in s for s in samples):   # drmix eval --run --max-queries
            lines += ["", "Sampled evaluation (--max-queries): the scores of a seeded sample of the queries, "
                          "not the full query set's."]
        elif samples:
            lines += ["", "Sampled evaluation (--max-queries / --max-docs): a smaller corpus is an easier task, so "
                          "these scores are not comparable with the full dataset's."]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "split": self.split, "metrics": self.metrics, "results": self.results,
                "average": self.average(), "info": self.info, "per_query": self.per_query}

    def write(self, out_dir: str | Path) -> None:
        """Write ``eval.json`` and ``eval.md`` into ``out_dir``, replaced together (a full disk leaves both)."""
        from drmix.io.atomic import AtomicFiles

        out = Path(out_dir)
        with AtomicFiles() as files:
            files.write_json(out / "eval.json", self.to_json())
            files.write_text(out / "eval.md", self.to_markdown())


def sample_label(name: str, info: Mapping[str, Any] | None) -> str:
    """``name``, or for a sampled evaluation (``info["subsample"]``, as :func:`evaluate_model` records it)
    ``"scifact (sample: 100 of 300 queries, 1,500 of 5,183 documents)"``."""
    sub = (info or {}).get("subsample")
    if not isinstance(sub, Mapping):
        return name
    parts = []
    for what, of in (("queries", "of_queries"), ("documents", "of_documents")):
        n, total = (info or {}).get(what), sub.get(of)
        if isinstance(n, int) and isinstance(total, int) and n != total:
            parts.append(f"{n:,} of {total:,} {what}")
    return f"{name} (sample: {', '.join(parts) or 'seed ' + str(sub.get('seed'))})"


def _fmt(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def dataset_names(data_dirs: Sequence[str | Path]) -> list[str]:
    """Label each directory by its name; clashes get the parent folder prepended (``a/scifact``)."""
    paths = [Path(d).expanduser().resolve() for d in data_dirs]
    base = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if base.count(p.name) > 1 else p.name for p in paths]


def _resolve_model(model: Any, max_length: int | None, model_kwargs: dict | None = None) -> tuple[Any, str]:
    import os

    if model is None or isinstance(model, (str, os.PathLike)):
        from drmix.model.encoder import load_encoder

        name = "default" if model is None else str(model)
        return load_encoder(None if model is None else str(model), max_seq_length=max_length,
                            model_kwargs=model_kwargs), name
    if not callable(getattr(model, "encode", None)):
        from drmix.errors import wrong_argument

        raise wrong_argument("evaluate_model", "model", model, "a SentenceTransformer (a model with encode), a model "
                             "folder, a Hub id or None (the default model)",
                             fix="pass SentenceTransformer(PATH) or the path itself.")
    return model, model_name(model)


def _check_k(k: int, metrics: Iterable[str]) -> None:
    cutoffs = [s.k for s in map(parse_metric, metrics) if s.k is not None]
    if cutoffs and k < max(cutoffs):
        log.warning("retrieving k=%d documents per query but a metric cuts off at %d; that metric is capped by k",
                    k, max(cutoffs))


CACHE_IDS_MIN_DOCS = 2000  # corpora this large keep their token ids on disk (drmix.data.tokenized.corpus_ids)


def evaluate_dataset(model: Any, data: BeirDataset, *, k: int = 100, batch_size: int = 64,
                     metrics: Sequence[str] = DEFAULT_METRICS, query_prompt: str | None = None,
                     max_length: int | None = None, show_progress: bool = False,
                     precision: str | None = "auto", dims: Sequence[int] = (),
                     per_query: dict | None = None,
                     query_instructions: Mapping[str, str] | None = None) -> dict[str, float]:
    """Index ``data.corpus``, retrieve for ``data.queries`` and score against ``data.qrels``.

    The query prompt is ``query_prompt`` (verbatim), else the dataset's instruction from
    ``query_instructions`` or the model folder's prompt named after the dataset (``data.name``), else the
    model's query prompt (:func:`drmix.model.instructions.query_prompt_for`).

    Returns the mean of each metric; with ``dims`` each metric is also reported at those truncated,
    re-normalised sizes (:mod:`drmix.evaluation.matryoshka`); when ``per_query`` is a dict it is filled with
    ``{query_id: {metric: value}}`` (what ``drmix compare`` pairs across models).
    """
    from drmix.model.instructions import query_prompt_for

    if query_prompt is None:
        query_prompt = query_prompt_for(model, data.name, instructions=query_instructions)
    if dims:
        from drmix.evaluation.matryoshka import evaluate_dims

        values = evaluate_dims(model, data.corpus, data.queries, data.qrels, dims, k=k, batch_size=batch_size,
                               metrics=metrics, query_prompt=query_prompt, max_length=max_length,
                               show_progress=show_progress, precision=precision, per_query=True)
    else:
        index = index_corpus(model, data.corpus, batch_size=batch_size, max_length=max_length,
                             show_progress=show_progress, store_texts=False, precision=precision,
                             cache_ids=len(data.corpus) >= CACHE_IDS_MIN_DOCS)
        run = search_queries(model, index, data.queries, k=k, batch_size=batch_size, prompt=query_prompt,
                             max_length=max_length, precision=precision)
        values = evaluate_run(data.qrels, run, metrics, per_query=True)
    if per_query is not None:
        per_query.update(values)
    n = len(values)
    return {m: sum(v[m] for v in values.values()) / n for m in next(iter(values.values()))}


def evaluate_model(model: Any, data_dirs: Sequence[str | Path], *, split: str = "test", k: int = 100,
                   batch_size: int = 64, metrics: Sequence[str] = DEFAULT_METRICS, query_prompt: str | None = None,
                   show_progress: bool = True, model_name: str = "", max_length: int | None = None,
                   precision: str | None = "auto", dims: Sequence[int] = (), max_queries: int | None = None,
                   max_docs: int | None = None, seed: int = 0,
                   query_instructions: Mapping[str, str] | None = None, model_kwargs: dict | None = None) -> EvalReport:
    """Evaluate ``model`` (a loaded SentenceTransformer, a path/hub id, or ``None`` for the default) on
    each BEIR directory; returns an :class:`EvalReport`. ``max_queries`` / ``max_docs`` evaluate a seeded
    subsample (judged documents of the kept queries always stay; see :func:`subsample`)."""
    from drmix.errors import ConfigError, path_list

    data_dirs = path_list("evaluate_model", "data_dirs", data_dirs, fix="pass BEIR folders: evaluate_model(model, "
                          "['beir/scifact', ...]).")
    if not data_dirs:
        raise ConfigError("no dataset given.", fix="pass at least one --data DIR (a BEIR directory).")
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    _check_k(k, metrics)
    model, resolved_name = _resolve_model(model, max_length, model_kwargs)
    results: dict[str, dict[str, float]] = {}
    info: dict[str, dict[str, Any]] = {}
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    for name, root in zip(dataset_names(data_dirs), data_dirs):
        t0 = time.perf_counter()
        data = load_beir(root, split)
        full = (len(data.queries), len(data.corpus))
        if max_queries is not None or max_docs is not None:
            data = subsample(data, max_queries=max_queries, max_docs=max_docs, seed=seed)
        log.info("evaluating on %s: %d documents, %d queries", name, len(data.corpus), len(data.queries))
        if not any(score > 0 for docs in data.qrels.values() for score in docs.values()):
            log.warning("%s: every judgement in the %r split is 0 (no relevant document); every metric will be 0. "
                        "Check qrels/%s.tsv.", name, split, split)
        results[name] = evaluate_dataset(model, data, k=k, batch_size=batch_size, metrics=metrics,
                                         query_prompt=query_prompt, max_length=max_length,
                                         show_progress=show_progress, precision=precision, dims=dims,
                                         per_query=per_query.setdefault(name, {}),
                                         query_instructions=query_instructions)
        info[name] = {"queries": len(data.queries), "documents": len(data.corpus),
                      "seconds": round(time.perf_counter() - t0, 2), "path": str(root)}
        if (len(data.queries), len(data.corpus)) != full:
            info[name].update(subsample={"of_queries": full[0], "of_documents": full[1], "seed": seed})
        log.info("%s: %s", name, ", ".join(f"{m}={v:.4f}" for m, v in results[name].items()))
    return EvalReport(model=model_name or resolved_name, split=split, results=results, info=info,
                      per_query=per_query)


# ----------------------------------------------------------------------------------------------- dev evaluator

def subsample(data: BeirDataset, *, max_queries: int | None = None, max_docs: int | None = None,
              seed: int = 0) -> BeirDataset:
    """A deterministic subset: at most ``max_queries`` judged queries, and a corpus of at most ``max_docs``
    documents that always contains every document judged for a kept query (so it can exceed
    ``max_docs`` when those alone are more)."""
    rng = np.random.default_rng(seed)
    qids = list(data.qrels)
    if max_queries is not None and len(qids) > max_queries:
        keep = sorted(rng.choice(len(qids), size=max_queries, replace=False))
        qids = [qids[i] for i in keep]
    qrels = {q: data.qrels[q] for q in qids}
    queries = {q: data.queries[q] for q in qids}
    corpus = data.corpus
    if max_docs is not None and len(corpus) > max_docs:
        judged = {d for docs in qrels.values() for d in docs}
        others = [d for d in corpus if d not in judged]
        room = max(0, max_docs - len(judged))
        picked = set(others[i] for i in rng.choice(len(others), size=min(room, len(others)), replace=False))
        corpus = {d: doc for d, doc in corpus.items() if d in judged or d in picked}
    return BeirDataset(root=data.root, corpus=corpus, queries=queries, qrels=qrels, split=data.split)


class DevEvaluator:
    """Callable the trainer runs every N steps: ``__call__(model) -> {'scifact/ndcg@10': ..., 'avg/ndcg@10': ...}``.

    Loads and caches the BEIR directories once (split ``dev`` by default, falling back to ``test``
    with a warning when a directory has no such split); ``max_queries`` / ``max_docs`` subsample
    deterministically (see :func:`subsample`) to keep each evaluation cheap. The model's train/eval
    mode is restored after each call.
    """

    def __init__(self, data_dirs: Sequence[str | Path], split: str = "dev", *, k: int = 100, batch_size: int = 64,
                 max_queries: int | None = None, max_docs: int | None = None, seed: int = 0,
                 metrics: Sequence[str] = DEFAULT_METRICS, max_length: int | None = None,
                 query_instructions: Mapping[str, str] | None = None) -> None:
        self.k = k
        self.query_instructions = dict(query_instructions or {})
        self.batch_size = batch_size
        self.metrics = tuple(metrics)
        self.max_length = max_length
        for m in self.metrics:
            parse_metric(m)
        self.datasets: dict[str, BeirDataset] = {}
        for name, root in zip(dataset_names(data_dirs), data_dirs):
            use = split
            if split not in available_splits(root) and "test" in available_splits(root):
                log.warning("%s has no %r split; evaluating on 'test' instead", root, split)
                use = "test"
            data = load_beir(root, use)
            self.datasets[name] = subsample(data, max_queries=max_queries, max_docs=max_docs, seed=seed)

    def __call__(self, model: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, data in self.datasets.items():
            scores = evaluate_dataset(model, data, k=self.k, batch_size=self.batch_size, metrics=self.metrics,
                                      max_length=self.max_length, query_instructions=self.query_instructions)
            out.update({f"{name}/{m}": v for m, v in scores.items()})
        for m in self.metrics:
            values = [out[f"{name}/{m}"] for name in self.datasets]
            out[f"avg/{m}"] = sum(values) / len(values)
        return out
