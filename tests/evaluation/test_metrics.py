"""Metrics against values worked out by hand (trec_eval conventions: gain = relevance, log2(rank+1) discount)."""
from __future__ import annotations

from math import log2

import pytest

from drmix.errors import ConfigError, DataError
from drmix.evaluation.metrics import DEFAULT_METRICS, evaluate_run, parse_metric, truncate_run

# q1 judged: d1 (1), d3 (2), d2 (0). q2 judged: d4 (1). q3 judged: d5 (1) but absent from the run.
QRELS = {"q1": {"d1": 1, "d2": 0, "d3": 2}, "q2": {"d4": 1}, "q3": {"d5": 1}}
RUN = {
    # ranking: d2 (0), d1 (1), d4 (unjudged), d3 (2), d5 (unjudged)
    "q1": {"d2": 0.9, "d1": 0.8, "d4": 0.7, "d3": 0.6, "d5": 0.5},
    # ranking: d1, d2, d3, d5, d4 -> the only relevant document is at rank 5
    "q2": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d5": 0.6, "d4": 0.1},
    "q9": {"d1": 1.0},  # not judged: ignored
}

Q1_NDCG10 = (1 / log2(3) + 2 / log2(5)) / (2 / log2(2) + 1 / log2(3))
Q2_NDCG10 = (1 / log2(6)) / 1.0


def test_per_query_values_match_hand_computation():
    pq = evaluate_run(QRELS, RUN, ["ndcg@10", "recall@3", "recall@100", "mrr@10", "map@100", "precision@2"],
                      per_query=True)
    assert set(pq) == {"q1", "q2", "q3"}
    assert pq["q1"]["ndcg@10"] == pytest.approx(Q1_NDCG10)
    assert pq["q2"]["ndcg@10"] == pytest.approx(Q2_NDCG10)
    assert pq["q1"]["recall@3"] == pytest.approx(0.5)        # d1 of {d1, d3} in the top 3
    assert pq["q1"]["recall@100"] == pytest.approx(1.0)
    assert pq["q2"]["recall@3"] == pytest.approx(0.0)
    assert pq["q1"]["mrr@10"] == pytest.approx(0.5)          # first relevant at rank 2
    assert pq["q2"]["mrr@10"] == pytest.approx(0.2)          # rank 5
    assert pq["q1"]["map@100"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert pq["q2"]["map@100"] == pytest.approx(1 / 5)
    assert pq["q1"]["precision@2"] == pytest.approx(0.5)
    assert pq["q3"] == {m: 0.0 for m in pq["q3"]}              # missing from the run -> 0


def test_means_are_over_every_judged_query():
    means = evaluate_run(QRELS, RUN)
    assert set(means) == set(DEFAULT_METRICS)
    assert means["ndcg@10"] == pytest.approx((Q1_NDCG10 + Q2_NDCG10 + 0) / 3)
    assert means["mrr@10"] == pytest.approx((0.5 + 0.2 + 0) / 3)
    assert means["recall@100"] == pytest.approx(2 / 3)
    assert means["map@100"] == pytest.approx((0.5 + 0.2) / 3)


def test_mrr_cutoff_truncates_the_run():
    # trec_eval's recip_rank has no cutoff; MRR@k must ignore relevant documents below rank k.
    pq = evaluate_run(QRELS, RUN, ["mrr@1", "mrr@2", "mrr@4", "mrr"], per_query=True)
    assert pq["q1"]["mrr@1"] == 0.0
    assert pq["q1"]["mrr@2"] == pytest.approx(0.5)
    assert pq["q2"]["mrr@4"] == 0.0
    assert pq["q2"]["mrr"] == pytest.approx(0.2)


def test_ties_rank_by_doc_id_descending_in_truncation_too():
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0}}  # tie: trec_eval puts "b" first
    pq = evaluate_run(qrels, run, ["mrr@1", "mrr@2", "ndcg@1"], per_query=True)
    assert pq["q"] == {"mrr@1": 0.0, "mrr@2": 0.5, "ndcg@1": 0.0}
    assert list(truncate_run(run, 1)["q"]) == ["b"]


def test_query_without_relevant_documents_scores_zero():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 0}}
    run = {"q1": {"d1": 1.0}, "q2": {"d2": 1.0}}
    assert evaluate_run(qrels, run, ["ndcg@10"]) == {"ndcg@10": pytest.approx(0.5)}


def test_graded_ndcg_uses_linear_gain():
    qrels = {"q": {"a": 2, "b": 1}}
    run = {"q": {"b": 2.0, "a": 1.0}}  # worse order: gain 1 at rank 1, gain 2 at rank 2
    expected = (1 + 2 / log2(3)) / (2 + 1 / log2(3))
    assert evaluate_run(qrels, run, ["ndcg@10"])["ndcg@10"] == pytest.approx(expected)


def test_parse_metric_forms():
    assert parse_metric("NDCG@10").measure == "ndcg_cut.10"
    assert parse_metric("recall@100").key == "recall_100"
    assert parse_metric("p@5").measure == "P.5"
    assert parse_metric("map").measure == "map"
    assert parse_metric("mrr@10").measure == "recip_rank"


@pytest.mark.parametrize("name", ["bleu@10", "recall", "ndcg@0", "ndcg@x", ""])
def test_bad_metric_names(name):
    with pytest.raises(ConfigError, match="metric"):
        evaluate_run(QRELS, RUN, [name])


def test_bad_inputs():
    with pytest.raises(DataError, match="empty"):
        evaluate_run({}, RUN)
    with pytest.raises(DataError, match="not an integer"):
        evaluate_run({"q": {"d": 0.5}}, {"q": {"d": 1.0}})
    with pytest.raises(DataError, match="NaN"):
        evaluate_run({"q": {"d": 1}}, {"q": {"d": float("nan")}})
    with pytest.raises(ConfigError, match="no metrics"):
        evaluate_run(QRELS, RUN, [])


def test_errors_name_the_problem_and_the_fix():
    cases = [
        (lambda: parse_metric("bleu@10"), ConfigError, "unknown metric 'bleu@10'.",
         "use one of: ndcg@k, recall@k, mrr@k, map@k, precision@k (and bare ndcg, map, mrr)."),
        (lambda: parse_metric("recall"), ConfigError, "metric 'recall' needs a cutoff.",
         "write it as recall@k, e.g. recall@100."),
        (lambda: parse_metric("p"), ConfigError, "metric 'p' needs a cutoff.", "write it as precision@k, e.g. precision@100."),
        (lambda: parse_metric("ndcg@0"), ConfigError, "metric 'ndcg@0' has a cutoff below 1.", "use a cutoff of 1 or more."),
        (lambda: evaluate_run({}, RUN), DataError, "qrels are empty: there is nothing to evaluate.",
         "pass qrels with at least one judged query."),
        (lambda: evaluate_run({"q": {"d": 0.5}}, {"q": {"d": 1.0}}), DataError,
         "qrels score for query 'q', doc 'd' is not an integer (0.5).", "use integer relevance scores."),
        (lambda: evaluate_run({"q": {"d": True}}, {"q": {"d": 1.0}}), DataError,
         "qrels score for query 'q', doc 'd' is not an integer (True).", "use integer relevance scores."),
        (lambda: evaluate_run({"q": {"d": 1}}, {"q": {"d": float("nan")}}), DataError,
         "run score for query 'q', doc 'd' is NaN.", "check the model's embeddings for NaNs."),
        (lambda: evaluate_run(QRELS, RUN, []), ConfigError, "no metrics requested.",
         "ask for at least one metric, e.g. ndcg@10."),
    ]
    for call, kind, message, fix in cases:
        with pytest.raises(kind) as e:
            call()
        assert (e.value.message, e.value.fix) == (message, fix)


def test_p_at_k_is_precision_at_k():
    spec = parse_metric("P@2")
    assert (spec.name, spec.family, spec.k, spec.measure) == ("p@2", "precision", 2, "P.2")
    pq = evaluate_run(QRELS, RUN, ["p@2", "precision@2"], per_query=True)
    assert pq["q1"]["p@2"] == pq["q1"]["precision@2"] == pytest.approx(0.5)   # d2 (0), d1 (1) in the top 2


def test_judged_queries_without_a_ranking_are_counted_in_a_warning(caplog):
    import logging

    run = {"q9": {"d1": 1.0}, "q1": dict(RUN["q1"]), "q2": {}}     # unjudged first; q2 ranks nothing
    with caplog.at_level(logging.WARNING, logger="drmix.evaluation.metrics"):
        pq = evaluate_run(QRELS, run, ["ndcg@10"], per_query=True)
    assert caplog.messages == ["2 of 3 judged queries have no ranking in the run; they score 0"]
    assert pq["q1"]["ndcg@10"] == pytest.approx(Q1_NDCG10) and pq["q2"]["ndcg@10"] == 0.0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.evaluation.metrics"):
        evaluate_run({"q1": QRELS["q1"]}, {"q1": RUN["q1"]}, ["ndcg@10"])
    assert caplog.messages == []


def test_mrr_at_k_next_to_other_metrics_and_several_cutoffs():
    pq = evaluate_run(QRELS, RUN, ["mrr@1", "ndcg@10", "mrr@2", "recall@3"], per_query=True)
    assert pq["q1"] == {"mrr@1": 0.0, "ndcg@10": pytest.approx(Q1_NDCG10), "mrr@2": 0.5, "recall@3": 0.5}
    assert evaluate_run(QRELS, RUN, ["mrr@10"], per_query=True)["q2"]["mrr@10"] == pytest.approx(0.2)
