"""drmix.evaluation.multi (rule, sweep, report): the dev-tuned rows, the sweep, Table 3, results.json, plots."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.errors import ConfigError
from drmix.evaluation.multi import best_rows, evaluate_multi, format_table, load_sweep_json, sweep_policies, \
    write_sweep
from drmix.retrieval.multi import CandidateSet, allocate_all, candidates_from_lists


def _toy_cset(queries=("q1", "q2"), rel_b="b2"):
    # The unseen corpus B always scores lower.  Relevant: a1 (q1, dq1) or a2 (q2, dq2) in A, ``rel_b`` in B.
    qrels, by_q = {}, {}
    for q in queries:
        by_q[q] = candidates_from_lists({
            "A": [("a1", 0.9), ("a2", 0.85), ("a3", 0.8), ("a4", 0.75)],
            "B": [("b1", 0.5), ("b2", 0.45), ("b3", 0.4)],
        })
        qrels[q] = {"A": {"a1" if q.endswith("1") else "a2": 1}, "B": {rel_b: 1}}
    return CandidateSet(["A", "B"], by_q), qrels


def test_sweep_rows_and_table_with_distinct_dev_and_test(tmp_path):
    test, qrels = _toy_cset()
    # Dev has other queries, and its B passage is b1: there fixed:0.5 (2 from A, b1) is best, while on
    # test (B passage b2) fixed:0.25 is best.  The dev-tuned row must apply dev's choice to test.
    dev, qrels_dev = _toy_cset(("dq1", "dq2"), rel_b="b1")
    res = sweep_policies(test, qrels, ["naive", "fixed:0.5", "fixed:0.25", "zscore", "calibrated", "oracle"], 3,
                         setting="toy/A", ks=(1, 2, 3), cset_dev=dev, qrels_dev=qrels_dev, standard=())
    # k=3: naive takes a1,a2,a3 -> B missed -> credit 0.5 for both queries.
    assert res.rows["naive"]["pc_recall@3"] == pytest.approx(0.5)
    # fixed:0.5 -> 2 from A (a1, a2), 1 from B (b1): B missed -> 0.5.
    assert res.rows["fixed:0.5"]["pc_recall@3"] == pytest.approx(0.5)
    # fixed:0.25 -> round(0.75)=1 from A, 2 from B: q1 gets a1 and b2 (1.0), q2 misses a2 (0.5).
    assert res.rows["fixed:0.25"]["pc_recall@3"] == pytest.approx(0.75)
    # oracle: q1 (1 + 2), q2 (2 + 2 > 3 -> one corpus) -> (1 + 0.5) / 2
    assert res.rows["oracle"]["pc_recall@3"] == pytest.approx(0.75)
    # On dev, fixed:0.5 gets a1/a2 and b1 for both queries (1.0) and fixed:0.25 gets (1.0 + 0.5) / 2.
    assert res.chosen["fixed"] == "fixed:0.5"
    assert res.rows["fixed (dev-tuned)"]["spec"] == "fixed:0.5"
    assert res.rows["fixed (dev-tuned)"]["pc_recall@3"] == pytest.approx(0.5)   # not the test-best 0.75
    assert res.chosen["label-free"] in ("zscore", "calibrated")
    assert res.rows["label-free (dev-chosen)"]["spec"] == res.chosen["label-free"]
    # k=1: only a1 -> q1 0.5, q2 0; k=2: a1, a2 -> 0.5 each.
    assert res.curves["naive"] == {1: pytest.approx(0.25), 2: pytest.approx(0.5), 3: pytest.approx(0.5)}
    # plotted: naive, oracle, then the dev-chosen rows (which replace their families' grid rows)
    plotted = best_rows(res)
    assert plotted[:2] == ["naive", "oracle"] and "fixed (dev-tuned)" in plotted and "fixed:0.25" not in plotted
    table = format_table([res])
    lines = table.splitlines()
    assert lines[0] == "| Known corpus → | toy/A (k=3) |"
    assert "| naive | 50.00/" in table
    assert "| fixed:0.25 | **75.00/" in table          # best non-oracle recall is bold
    assert "| oracle | 75.00/" in table                # the oracle is never bold
    assert "Chosen on the validation split: toy/A: fixed:0.5" in table
    paths = write_sweep([res], tmp_path)
    assert paths["table"].read_text() == table
    back = load_sweep_json(paths["json"])
    assert back[0].rows["naive"]["pc_recall@3"] == res.rows["naive"]["pc_recall@3"]
    assert back[0].curves["oracle"] == res.curves["oracle"]
    assert json.loads(paths["json"].read_text())[0]["chosen_on_dev"]["fixed"] == "fixed:0.5"
    png = paths["plot:toy/A"]
    assert png.name == "recall_vs_k-toy-A.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_tuning_on_the_evaluated_queries_is_an_error():
    test, qrels = _toy_cset()
    dev, qrels_dev = _toy_cset(("dq1", "q2"))
    with pytest.raises(ConfigError, match="shares 1 of its queries"):
        sweep_policies(test, qrels, ["fixed:0.5"], 3, cset_dev=dev, qrels_dev=qrels_dev, standard=())


def test_sweep_oracle_optimises_the_credit_mode_evaluated():
    # A holds two relevant passages (a1, a3), B one (b1) that scores high.  k = 4.
    cset = CandidateSet(["A", "B"], {"q": candidates_from_lists({
        "A": [("a1", 0.5), ("a2", 0.4), ("a3", 0.3)], "B": [("b1", 0.9), ("b2", 0.8)]})})
    qrels = {"q": {"A": {"a1": 1, "a3": 1}, "B": {"b1": 1}}}
    # "any": (2,2) and (3,1) both score 1; (2,2) has the larger score sum.  Its fraction credit is
    # (1/2 + 1) / 2 = 0.75, while (3, 1) gets (2/2 + 1) / 2 = 1.
    any_ = sweep_policies(cset, qrels, ["oracle", "fixed:0.75"], 4, standard=())
    frac = sweep_policies(cset, qrels, ["oracle", "fixed:0.75"], 4, mode="fraction", standard=())
    assert any_.rows["oracle"]["pc_recall@4"] == pytest.approx(1.0)
    assert frac.rows["oracle"]["spec"] == "oracle:mode=fraction"
    assert frac.rows["oracle"]["pc_recall@4"] == pytest.approx(1.0)
    assert frac.rows["fixed:0.75"]["pc_recall@4"] == pytest.approx(1.0)     # 3 from A, 1 from B
    assert evaluate_multi(qrels, allocate_all(cset, "oracle", 4, qrels), 4, mode="fraction",
                          standard=())["pc_recall@4"] == pytest.approx(0.75)  # the any-oracle under fraction


def test_sweep_per_query_and_limited_curves():
    cset, qrels = _toy_cset()
    res = sweep_policies(cset, qrels, ["naive", "fixed:0.25"], 3, ks=(1, 3), curves_for=["naive"],
                         per_query=True, standard=())
    # merged a1, b1, b2: q1 finds a1 at 1 and b2 at 3 -> MRR (1 + 1/3) / 2; q2 only b2 -> (0 + 1/3) / 2.
    assert res.rows["fixed:0.25"]["per_query"] == {"q1": {"pc_recall": 1.0, "pc_mrr": pytest.approx(2 / 3)},
                                                   "q2": {"pc_recall": 0.5, "pc_mrr": pytest.approx(1 / 6)}}
    assert set(res.curves["naive"]) == {1, 3} and set(res.curves["fixed:0.25"]) == {3}


def test_sweep_standard_metrics_present_by_default():
    cset, qrels = _toy_cset()
    res = sweep_policies(cset, qrels, ["naive"], 3)
    assert set(res.rows["naive"]) >= {"ndcg@3", "mrr@3", "recall@3", "pc_recall@3", "pc_mrr@3"}
    # naive: the first hit is relevant for q1 (a1, rank 1) and for q2 at rank 2 (a2) -> MRR (1 + 0.5) / 2
    assert res.rows["naive"]["mrr@3"] == pytest.approx(0.75)
    assert np.isfinite(res.rows["naive"]["ndcg@3"])
