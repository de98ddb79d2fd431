"""drmix.evaluation.multi.metrics: per-corpus credit Recall@k / MRR and standard metrics over merged lists."""
from __future__ import annotations

import pytest

from drmix.evaluation.multi import evaluate_multi, query_credit, query_rr
from drmix.retrieval.multi import Hit


def H(spec: str, score: float = 0.0) -> Hit:
    c, d = spec.split(":")
    return Hit(c, d, score)


REL = {"A": {"a3": 1}, "B": {"b2": 1, "b9": 1}}


def test_credit_any_and_fraction_by_hand():
    hits = [H("A:a1"), H("B:b2"), H("A:a3")]
    # any: A found (a3), B found (b2) -> 1.0; fraction: A 1/1, B 1/2 -> 0.75
    assert query_credit(hits, REL, 3) == 1.0
    assert query_credit(hits, REL, 3, mode="fraction") == 0.75
    # k=2 cuts a3: A 0, B 1 -> 0.5 (the paper's "0.5 if one is retrieved")
    assert query_credit(hits, REL, 2) == 0.5
    assert query_credit(hits, REL, 2, mode="fraction") == 0.25
    assert query_credit([], REL, 3) == 0.0
    # A corpus whose judgements are all 0 does not count; no relevant passage at all -> None.
    assert query_credit(hits, {"A": {"a3": 1}, "B": {"b2": 0}}, 3) == 1.0
    assert query_credit(hits, {"A": {"a3": 0}}, 3) is None
    # Three corpora: one of three found.
    assert query_credit([H("C:c1")], {"A": {"a": 1}, "B": {"b": 1}, "C": {"c1": 1}}, 5) == pytest.approx(1 / 3)


def test_per_corpus_reciprocal_rank_by_hand():
    hits = [H("A:a1"), H("B:b2"), H("A:a3"), H("B:b9")]
    # A's first relevant at rank 3, B's at rank 2 -> (1/3 + 1/2) / 2
    assert query_rr(hits, REL, 10) == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert query_rr(hits, REL, 2) == pytest.approx((0 + 1 / 2) / 2)


def test_evaluate_multi_averages_and_counts_missing_queries_as_zero():
    qrels = {"q1": REL, "q2": {"A": {"x": 1}}, "q3": {"A": {"y": 0}}}   # q3 has no relevant passage
    results = {"q1": [H("A:a1", .9), H("B:b2", .8), H("A:a3", .7)], "q3": [H("A:y", 1.0)]}
    m = evaluate_multi(qrels, results, 3, standard=())
    assert m["num_queries"] == 2
    assert m["pc_recall@3"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["pc_mrr@3"] == pytest.approx(((1 / 3 + 1 / 2) / 2 + 0) / 2)
    assert m["budget_share"] == {"A": pytest.approx(2 / 6), "B": pytest.approx(1 / 6)}


def test_standard_metrics_follow_the_policy_order_not_raw_scores():
    qrels = {"q1": {"A": {"a1": 0}, "B": {"b1": 1}}}
    # A policy put B:b1 (raw 0.5) above A:a1 (raw 0.9); MRR@10 must be 1, not 1/2.
    results = {"q1": [H("B:b1", 0.5), H("A:a1", 0.9)]}
    m = evaluate_multi(qrels, results, 10, standard=("mrr@10", "recall@10"))
    assert m["mrr@10"] == pytest.approx(1.0)
    assert m["recall@10"] == pytest.approx(1.0)
    m2 = evaluate_multi(qrels, {"q1": [H("A:a1", 0.9), H("B:b1", 0.5)]}, 10, standard=("mrr@10",))
    assert m2["mrr@10"] == pytest.approx(0.5)
