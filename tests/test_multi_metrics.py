"""Per-corpus credit Recall@k / MRR, standard metrics over merged lists, and the sweep table."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.evaluation.multi_metrics import (
    best_rows,
    evaluate_multi,
    format_table,
    load_sweep_json,
    query_credit,
    query_rr,
    sweep_policies,
    write_sweep,
)
from drmix.retrieval.multi import CandidateSet, Hit, candidates_from_lists


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


def _toy_cset():
    # Two queries; the unseen corpus B always scores lower.  Relevant: a_i in A, b2 in B.
    qrels, by_q = {}, {}
    for q, rel_a in (("q1", "a1"), ("q2", "a2")):
        by_q[q] = candidates_from_lists({
            "A": [("a1", 0.9), ("a2", 0.85), ("a3", 0.8), ("a4", 0.75)],
            "B": [("b1", 0.5), ("b2", 0.45), ("b3", 0.4)],
        })
        qrels[q] = {"A": {rel_a: 1}, "B": {"b2": 1}}
    return CandidateSet(["A", "B"], by_q), qrels


def test_sweep_rows_tuning_on_dev_and_table(tmp_path):
    cset, qrels = _toy_cset()
    res = sweep_policies(cset, qrels, ["naive", "fixed:0.5", "fixed:0.25", "oracle"], 3, setting="toy/A",
                         ks=(1, 2, 3), cset_dev=cset, qrels_dev=qrels, standard=())
    # k=3: naive takes a1,a2,a3 -> B missed -> credit 0.5 for both queries.
    assert res.rows["naive"]["pc_recall@3"] == pytest.approx(0.5)
    # fixed:0.5 -> 2 from A (a1, a2), 1 from B (b1): B missed -> 0.5.
    assert res.rows["fixed:0.5"]["pc_recall@3"] == pytest.approx(0.5)
    # fixed:0.25 -> round(0.75)=1 from A, 2 from B: q1 gets a1 and b2 (1.0), q2 misses a2 (0.5).
    assert res.rows["fixed:0.25"]["pc_recall@3"] == pytest.approx(0.75)
    # oracle: q1 (1 + 2), q2 (2 + 2 > 3 -> one corpus) -> (1 + 0.5) / 2
    assert res.rows["oracle"]["pc_recall@3"] == pytest.approx(0.75)
    assert res.chosen == {"fixed": "fixed:0.25"}
    assert res.rows["fixed (dev-tuned)"]["spec"] == "fixed:0.25"
    # k=1: only a1 -> q1 0.5, q2 0; k=2: a1, a2 -> 0.5 each.
    assert res.curves["naive"] == {1: pytest.approx(0.25), 2: pytest.approx(0.5), 3: pytest.approx(0.5)}
    assert best_rows(res) == ["naive", "oracle", "fixed:0.25"]   # best per family, dev-tuned rows left out
    table = format_table([res])
    lines = table.splitlines()
    assert lines[0] == "| Known corpus → | toy/A (k=3) |"
    assert "| naive | 50.00/" in table
    assert "| fixed:0.25 | **75.00/" in table          # best non-oracle recall is bold
    assert "| oracle | 75.00/" in table                # the oracle is never bold
    assert table.rstrip().endswith("Chosen on the validation split: toy/A: fixed:0.25.")
    paths = write_sweep([res], tmp_path)
    assert paths["table"].read_text() == table
    back = load_sweep_json(paths["json"])
    assert back[0].rows["naive"]["pc_recall@3"] == res.rows["naive"]["pc_recall@3"]
    assert back[0].curves["oracle"] == res.curves["oracle"]
    assert json.loads(paths["json"].read_text())[0]["chosen_on_dev"] == {"fixed": "fixed:0.25"}
    png = paths["plot:toy/A"]
    assert png.name == "recall_vs_k-toy-A.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_sweep_standard_metrics_present_by_default():
    cset, qrels = _toy_cset()
    res = sweep_policies(cset, qrels, ["naive"], 3)
    assert set(res.rows["naive"]) >= {"ndcg@3", "mrr@3", "recall@3", "pc_recall@3", "pc_mrr@3"}
    # naive: the first hit is relevant for q1 (a1, rank 1) and for q2 at rank 2 (a2) -> MRR (1 + 0.5) / 2
    assert res.rows["naive"]["mrr@3"] == pytest.approx(0.75)
    assert np.isfinite(res.rows["naive"]["ndcg@3"])
