"""Retrieval metrics (nDCG@k, Recall@k, MRR@k, MAP@k, P@k) over a qrels/run pair.

The numbers come from ``pytrec_eval`` (the C trec_eval behind BEIR's and MTEB's evaluators): it needs no JIT
warm-up, whereas ``ranx`` compiles with numba on its first call in a process, which would dominate tests and
short dev evaluations.

Metric names are ``name@k`` (or bare ``name``): ``ndcg@k`` (trec_eval ``ndcg_cut``, graded gains),
``recall@k``, ``map@k`` (``map_cut``), ``precision@k`` / ``p@k`` (``P``), ``mrr@k`` and bare ``ndcg``,
``map``, ``mrr``. Binary metrics count a document relevant when its qrels score is >= 1.

Conventions, stated because they change the numbers:

* **MRR@k** is the reciprocal rank of the first relevant document *within the top k* (0 if none).
  trec_eval's ``recip_rank`` has no cutoff, so the run is truncated to each query's top k before it is
  computed (BEIR computes MRR@k by hand the same way).
* **Ranking and ties**: documents are ranked by score, descending; equal scores are ordered by document
  id, descending (trec_eval's rule). The truncation for MRR@k uses the same order.
* **Averaging**: the mean is taken over every query in the qrels. A query in the qrels that is absent
  from the run scores 0 on every metric (trec_eval ``-c``); BEIR's averaging (over the queries
  pytrec_eval returns) gives the same number whenever every query has a ranking, which is what
  drmix's retrieval always produces. A query whose qrels hold no relevant document (all scores 0)
  scores 0, as in pytrec_eval and BEIR. Queries in the run but not in the qrels are ignored.
"""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from drmix.errors import ConfigError, DataError, wrong_argument

log = logging.getLogger(__name__)

DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr@10", "map@100")

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

# drmix name -> (trec_eval measure family, whether a cutoff is required)
_FAMILIES = {
    "ndcg": ("ndcg_cut", "ndcg"),
    "recall": ("recall", None),
    "map": ("map_cut", "map"),
    "precision": ("P", None),
    "p": ("P", None),
    "mrr": ("recip_rank", "recip_rank"),
}
_NAME_RE = re.compile(r"^\s*([a-z]+)\s*(?:@\s*(\d+))?\s*$")


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric: ``name`` as given, its trec_eval measure and output key, and the cutoff."""

    name: str
    family: str
    k: int | None

    @property
    def measure(self) -> str:
        """The measure string handed to pytrec_eval (``ndcg_cut.10``)."""
        return self._pytrec_name(".")

    @property
    def key(self) -> str:
        """The key pytrec_eval uses in its output (``ndcg_cut_10``)."""
        return self._pytrec_name("_")

    def _pytrec_name(self, sep: str) -> str:
        if self.family == "mrr":
            return "recip_rank"
        fam, bare = _FAMILIES[self.family]
        return f"{fam}{sep}{self.k}" if self.k is not None else bare


def parse_metric(name: str) -> MetricSpec:
    """Parse ``'ndcg@10'``-style names; raises :class:`ConfigError` naming the supported forms."""
    m = _NAME_RE.match(name.lower())
    supported = "ndcg@k, recall@k, mrr@k, map@k, precision@k (and bare ndcg, map, mrr)"
    if not m or m.group(1) not in _FAMILIES:
        raise ConfigError(f"unknown metric {name!r}.", fix=f"use one of: {supported}.")
    family, k = m.group(1), m.group(2)
    family = "precision" if family == "p" else family
    if k is None and _FAMILIES[family][1] is None:
        raise ConfigError(f"metric {name!r} needs a cutoff.", fix=f"write it as {family}@k, e.g. {family}@100.")
    if k is not None and int(k) < 1:
        raise ConfigError(f"metric {name!r} has a cutoff below 1.", fix="use a cutoff of 1 or more.")
    return MetricSpec(name=name.strip().lower(), family=family, k=int(k) if k is not None else None)


def truncate_run(run: Run, k: int) -> dict[str, dict[str, float]]:
    """Keep each query's top ``k`` documents, ranked by score then document id (both descending)."""
    out: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        if len(docs) <= k:
            out[qid] = dict(docs)
        else:
            top = sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
            out[qid] = dict(top)
    return out


def _mapping_of_mappings(name: str, value: object, scores: str) -> None:
    """``qrels`` / ``run`` as :func:`evaluate_run` takes them: ``{query id: {doc id: score}}``."""
    fix = (f"pass {{query id: {{doc id: {scores}}}}}, e.g. {{'q1': {{'d3': 1}}}}; drmix.load_beir(DIR).qrels and "
           "drmix.retrieval.trec.read_run(FILE) give them.")
    if not isinstance(value, Mapping):
        raise wrong_argument("evaluate_run", name, value, "a mapping of query ids to {doc id: score}", fix=fix)
    for qid, docs in value.items():
        if not isinstance(docs, Mapping):
            raise wrong_argument("evaluate_run", f"{name}[{qid!r}]", docs, "a mapping of doc ids to scores", fix=fix)


def _number(value: object, what: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DataError(f"{what} is not a number ({value!r}).", fix="use numeric scores.") from None


def _clean_qrels(qrels: Qrels) -> dict[str, dict[str, int]]:
    _mapping_of_mappings("qrels", qrels, "relevance")
    if not qrels:
        raise DataError("qrels are empty: there is nothing to evaluate.",
                        fix="pass qrels with at least one judged query.")
    clean: dict[str, dict[str, int]] = {}
    for qid, docs in qrels.items():
        row: dict[str, int] = {}
        for did, rel in docs.items():
            if isinstance(rel, bool) or not _number(rel, f"qrels score for query {qid!r}, doc {did!r}").is_integer():
                raise DataError(f"qrels score for query {qid!r}, doc {did!r} is not an integer ({rel!r}).",
                                fix="use integer relevance scores.")
            row[str(did)] = int(rel)
        clean[str(qid)] = row
    return clean


def _clean_run(run: Run, qrels: Mapping[str, object]) -> dict[str, dict[str, float]]:
    _mapping_of_mappings("run", run, "score")
    clean: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        qid = str(qid)
        if qid not in qrels or not docs:
            continue
        row: dict[str, float] = {}
        for did, score in docs.items():
            s = _number(score, f"run score for query {qid!r}, doc {did!r}")
            if math.isnan(s):
                raise DataError(f"run score for query {qid!r}, doc {did!r} is NaN.",
                                fix="check the model's embeddings for NaNs.")
            row[str(did)] = s
        clean[qid] = row
    return clean


def _evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]],
              specs: list[MetricSpec]) -> dict[str, dict[str, float]]:
    """Per-query values for every spec; queries missing from the run get 0."""
    import pytrec_eval

    per_query: dict[str, dict[str, float]] = {qid: {s.name: 0.0 for s in specs} for qid in qrels}
    plain = [s for s in specs if s.family != "mrr" or s.k is None]
    groups: list[tuple[list[MetricSpec], dict[str, dict[str, float]]]] = []
    if plain:
        groups.append((plain, run))
    for k in sorted({s.k for s in specs if s.family == "mrr" and s.k is not None}):
        groups.append(([s for s in specs if s.family == "mrr" and s.k == k], truncate_run(run, k)))
    for group, group_run in groups:
        if not group_run:
            continue
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {s.measure for s in group})
        for qid, values in evaluator.evaluate(group_run).items():
            for s in group:
                per_query[qid][s.name] = float(values[s.key])
    return per_query


def evaluate_run(qrels: Qrels, run: Run, metrics: Iterable[str] = DEFAULT_METRICS, *,
                 per_query: bool = False) -> dict:
    """Score ``run`` (query id -> doc id -> score) against ``qrels`` (query id -> doc id -> relevance).

    Returns ``{metric: mean}`` over every query in ``qrels`` (see the module docstring for the
    conventions), or with ``per_query=True`` ``{query_id: {metric: value}}``.
    """
    specs = [parse_metric(m) for m in ((metrics,) if isinstance(metrics, str) else metrics)]
    if not specs:
        raise ConfigError("no metrics requested.", fix=f"ask for at least one metric, e.g. {DEFAULT_METRICS[0]}.")
    clean_qrels = _clean_qrels(qrels)
    clean_run = _clean_run(run, clean_qrels)
    missing = len(clean_qrels) - len(clean_run)
    if missing:
        log.warning("%d of %d judged queries have no ranking in the run; they score 0", missing, len(clean_qrels))
    values = _evaluate(clean_qrels, clean_run, specs)
    if per_query:
        return values
    n = len(values)
    return {s.name: sum(v[s.name] for v in values.values()) / n for s in specs}
