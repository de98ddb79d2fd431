"""Evaluation for queries whose relevant passages live in several corpora, and the policy sweep.

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 5.3 and Table 3. Notation: a query ``q`` has relevance judgements in several corpora; ``C_q`` is
the set of corpora holding at least one relevant passage of ``q`` (grade > 0); ``R_{q,c}`` the relevant
passages of ``q`` in corpus ``c``; ``L_q`` the merged top-k list an allocation policy returns.

* **Per-corpus credit recall** ``pc_recall@k`` (the paper's Recall@k: "1 if both passages are retrieved,
  0.5 if one is retrieved and 0 otherwise")::

      credit(q) = 1/|C_q| * sum_{c in C_q} hit_c(q)
      hit_c(q)  = 1 if L_q[:k] contains any passage of R_{q,c}            (mode "any", the default)
                = |L_q[:k] ∩ R_{q,c}| / |R_{q,c}|                          (mode "fraction")

  The paper has exactly one relevant passage per corpus, where both modes agree. With several relevant
  passages in one corpus (an entity matched to two listings) "any" asks for one passage from every
  corpus, which is what a reader needs; "fraction" is stricter. ``pc_recall@k`` is the mean over queries
  with ``|C_q| > 0``; a query with no result list scores 0.
* **Per-corpus MRR** ``pc_mrr@k`` (the paper's MRR, "the reciprocal of the rank at which the true
  passage appears", made per-corpus like the recall)::

      pc_rr(q) = 1/|C_q| * sum_{c in C_q} 1 / rank of the first passage of R_{q,c} in L_q[:k]   (0 if absent)

* **Standard metrics** (nDCG, MRR, Recall, MAP) through :func:`drmix.evaluation.metrics.evaluate_run`
  (pytrec_eval) over the merged list. Documents are qualified as ``corpus/doc_id`` so ids never collide,
  and each hit's run score is ``len(L_q) - rank`` so that the policy's order, not the raw similarity, is
  what gets evaluated (a policy may put a lower raw score above a higher one).

Loading the judgements of several BEIR directories: :func:`load_multi_qrels`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.errors import DataError
from drmix.retrieval.multi import Hit


MultiQrels = dict[str, dict[str, dict[str, int]]]   # qid -> corpus -> doc id -> grade


def qualify(corpus: str, doc_id: str) -> str:
    """The id of a passage across corpora: ``corpus/doc_id``."""
    return f"{corpus}/{doc_id}"


def _judged(rel: Mapping[str, Mapping[str, int]]) -> dict[str, set[str]]:
    return {c: {d for d, g in docs.items() if g > 0} for c, docs in rel.items()
            if any(g > 0 for g in docs.values())}


def query_credit(hits: Sequence[Hit], rel: Mapping[str, Mapping[str, int]], k: int, mode: str = "any") -> float | None:
    """Per-corpus credit recall of one query (None when it has no relevant passage)."""
    judged = _judged(rel)
    if not judged:
        return None
    top = hits[:k]
    total = 0.0
    for c, docs in judged.items():
        found = sum(1 for h in top if h.corpus == c and h.doc_id in docs)
        total += (1.0 if found else 0.0) if mode == "any" else found / len(docs)
    return total / len(judged)


def query_rr(hits: Sequence[Hit], rel: Mapping[str, Mapping[str, int]], k: int) -> float | None:
    """Per-corpus reciprocal rank of one query (None when it has no relevant passage)."""
    judged = _judged(rel)
    if not judged:
        return None
    total = 0.0
    for c, docs in judged.items():
        for rank, h in enumerate(hits[:k], start=1):
            if h.corpus == c and h.doc_id in docs:
                total += 1.0 / rank
                break
    return total / len(judged)


def flatten_qrels(qrels: MultiQrels) -> dict[str, dict[str, int]]:
    return {q: {qualify(c, d): int(g) for c, docs in by_c.items() for d, g in docs.items()}
            for q, by_c in qrels.items()}


def flatten_run(results: Mapping[str, Sequence[Hit]]) -> dict[str, dict[str, float]]:
    """Run with ``corpus/doc_id`` ids and order-preserving scores ``len - rank``."""
    return {q: {qualify(h.corpus, h.doc_id): float(len(hits) - r) for r, h in enumerate(hits)}
            for q, hits in results.items()}


def evaluate_multi(qrels: MultiQrels, results: Mapping[str, Sequence[Hit]], k: int, *, mode: str = "any",
                   standard: Sequence[str] | None = None, per_query: bool = False) -> dict[str, Any]:
    """``pc_recall@k``, ``pc_mrr@k``, the share of the budget each corpus got, and standard metrics.

    ``standard`` defaults to ``ndcg@k``, ``mrr@k`` and ``recall@k`` (per-passage recall); pass ``()`` to skip
    pytrec_eval. With ``per_query`` the result also holds ``per_query: {qid: {pc_recall, pc_mrr}}``.
    """
    credits: dict[str, float] = {}
    rrs: dict[str, float] = {}
    share: dict[str, float] = {}
    for q, rel in qrels.items():
        hits = list(results.get(q, []))
        c = query_credit(hits, rel, k, mode)
        if c is None:
            continue
        credits[q] = c
        rrs[q] = query_rr(hits, rel, k) or 0.0
        for h in hits[:k]:
            share[h.corpus] = share.get(h.corpus, 0.0) + 1.0
    n = len(credits)
    out: dict[str, Any] = {
        f"pc_recall@{k}": sum(credits.values()) / n if n else 0.0,
        f"pc_mrr@{k}": sum(rrs.values()) / n if n else 0.0,
        "num_queries": n,
        "budget_share": {c: v / (n * k) for c, v in sorted(share.items())} if n else {},
    }
    metrics = list(standard) if standard is not None else [f"ndcg@{k}", f"mrr@{k}", f"recall@{k}"]
    if metrics and n:
        from drmix.evaluation.metrics import evaluate_run

        judged_q = set(credits)
        flat_q = {q: v for q, v in flatten_qrels(qrels).items() if q in judged_q}
        flat_r = flatten_run({q: list(results.get(q, [])[:k]) for q in judged_q})  # absent queries score 0
        out.update(evaluate_run(flat_q, flat_r, tuple(metrics)))
    if per_query:
        out["per_query"] = {q: {"pc_recall": credits[q], "pc_mrr": rrs[q]} for q in credits}
    return out


def load_multi_qrels(corpus_dirs: Mapping[str, str | Path], split: str) -> tuple[dict[str, str], MultiQrels]:
    """Queries (union over the corpus directories) and ``qrels[qid][corpus][doc]`` of one split.

    Each directory is a BEIR directory; a corpus without ``qrels/{split}.tsv`` simply has no relevant
    passages. At least one directory must have the split.
    """
    from drmix.data.beir import available_splits, load_beir

    queries: dict[str, str] = {}
    qrels: MultiQrels = {}
    found = False
    for name, d in corpus_dirs.items():
        if split not in available_splits(d):
            continue
        found = True
        ds = load_beir(d, split=split, load_corpus=False)
        for q, text in ds.queries.items():
            queries.setdefault(q, text if isinstance(text, str) else str(text.get("text", "")))
        for q, docs in ds.qrels.items():
            qrels.setdefault(q, {})[name] = {str(doc): int(g) for doc, g in docs.items()}
    if not found:
        raise DataError(f"no corpus directory has qrels/{split}.tsv.", path=next(iter(corpus_dirs.values()), None),
                        fix="pass --split with a split that exists (e.g. dev or test).")
    return {q: queries[q] for q in qrels if q in queries}, qrels
