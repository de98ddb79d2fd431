"""benchmarks/multicorpus_ceiling.py: the dev-label ceilings and the calibration check, by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from drmix.retrieval.multi import CandidateSet, CorpusCandidates

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import multicorpus_ceiling as mc  # noqa: E402


def cc(ids, scores):
    return CorpusCandidates(list(ids), np.array(scores, dtype=np.float64))


@pytest.fixture
def two_queries():
    """Corpus a: relevant at rank 0 for q1, rank 2 for q2; corpus b: rank 1 for q1, absent for q2."""
    cset = CandidateSet(["a", "b"], {
        "q1": {"a": cc("xyz", [0.9, 0.5, 0.4]), "b": cc("uvw", [0.8, 0.7, 0.1])},
        "q2": {"a": cc("xyz", [0.6, 0.55, 0.5]), "b": cc("uvw", [0.9, 0.3, 0.2])},
    })
    qrels = {"q1": {"a": {"x": 1}, "b": {"v": 1}}, "q2": {"a": {"z": 1}, "b": {"zz": 1}}}
    return cset, qrels


def test_fitted_rank_greedy_is_the_best_query_blind_split(two_queries):
    cset, qrels = two_queries
    # P_a(r) = (1/2, 0, 1/2) -> cumulative min (1/2, 0, 0); P_b(r) = (0, 1/2, 0) -> (0, 0, 0); keys minus
    # 1e-9 r. k = 2: a's rank 0 (1/2), then b's rank 0 (0) before every rank-1 key (-1e-9): one from each.
    run = mc.fitted_greedy(cset, qrels, "rank", 2)
    assert [(h.corpus, h.doc_id) for h in run["q1"]] == [("a", "x"), ("b", "u")]
    assert [(h.corpus, h.doc_id) for h in run["q2"]] == [("a", "x"), ("b", "u")]


def test_split_per_bin_picks_each_bins_best_split(two_queries):
    cset, qrels = two_queries
    # With k = 2 and one bin for everything ("rank"): splits (k_a, k_b) = (0,2): q1 finds v (1/2), q2 0 ->
    # 0.5; (1,1): q1 x (1/2), q2 0 -> 0.5; (2,0): q1 x (1/2), q2 0 -> 0.5. Best 0.5 over 2 queries = 25.
    assert mc.split_per_bin(cset, qrels, "rank", 2) == pytest.approx(25.0)
    # k = 3: (1,2) finds x and v for q1 (1.0), (3,0) finds q2's z (1/2) and q1's x (1/2): best is 1.0 -> 50.
    assert mc.split_per_bin(cset, qrels, "rank", 3) == pytest.approx(50.0)


def test_calibration_counts_ranks_and_softmax_mass(two_queries):
    cset, qrels = two_queries
    cal = mc.calibration(cset, qrels)
    assert cal["a"]["relevant in top 1"] == 0.5 and cal["a"]["relevant in top 10"] == 1.0
    assert cal["b"]["relevant in top 1"] == 0.0 and cal["b"]["relevant in top 10"] == 0.5
    # coverage mass on a's top 1: mean over q1, q2 of softmax(s / 0.05)[0]
    s1, s2 = np.array([0.9, 0.5, 0.4]) / 0.05, np.array([0.6, 0.55, 0.5]) / 0.05
    expect = (np.exp(s1[0]) / np.exp(s1).sum() + np.exp(s2[0]) / np.exp(s2).sum()) / 2
    assert cal["a"]["coverage mass on top 1"] == pytest.approx(expect)
    assert cal["a"]["coverage mass on top 100"] == pytest.approx(1.0)


def test_feature_bins():
    c = CorpusCandidates(["a", "b"], np.array([0.55, 0.52]), background=(0.1, 0.1))
    # gap 0.03 -> bin 3 of (0.005, 0.01, 0.02, 0.04, 0.08); z = (0.55 - 0.1) / 0.1 = 4.5 -> bin 2 of (3, 4, ...)
    assert mc.feature(c, "rank") == 0
    assert mc.feature(c, "rank+gap") == 3 and mc.feature(c, "rank+z") == 2
    assert mc.feature(c, "rank+gap+z") == 32
