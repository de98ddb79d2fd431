"""Federated-search policies (equal, redde, crcs, coverage), the merge option and the N-corpus oracle,
against allocations computed by hand."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from drmix.errors import ConfigError
from drmix.retrieval.multi import CandidateSet, CorpusCandidates, allocate_all, credit_curve, parse_policy
from drmix.retrieval.multi.retriever import background_stats, sample_view
from drmix.retrieval.multi.selection import crcs_weight, csi_estimates, redde_weight


def cc(prefix, scores, sample=None, size=None, sample_size=None):
    return CorpusCandidates([f"{prefix}{i}" for i in range(len(scores))], np.array(scores, dtype=float),
                            None, None if sample is None else np.array(sample, dtype=float), size, sample_size)


def ids(hits):
    return [f"{h.corpus}:{h.doc_id}" for h in hits]


def counts(hits):
    out = {}
    for h in hits:
        out[h.corpus] = out.get(h.corpus, 0) + 1
    return out


def csi_case():
    # A: 100 passages, sample of 10 (each sampled passage stands for 10); B: 20 passages, sample of 10 (for 2).
    return {"A": cc("a", [0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6], [0.9, 0.5, 0.1], 100, 10),
            "B": cc("b", [0.99, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3], [0.8, 0.7, 0.6, 0.2], 20, 10)}


def test_equal_splits_k_over_n_and_gives_unusable_budget_to_the_best_remaining():
    cands = {"A": cc("a", [0.9, 0.8, 0.7, 0.6]), "B": cc("b", [0.5, 0.4, 0.3]), "C": cc("c", [0.95])}
    # k = 7 -> quotas 3, 2, 2 (remainder to the earlier corpus); C has one passage, its spare slot goes to
    # the best remaining candidate by raw score: a4 (0.6) beats b3 (0.3).
    assert counts(parse_policy("equal").allocate(cands, 7)) == {"A": 4, "B": 2, "C": 1}
    assert ids(parse_policy("equal").allocate(cands, 3)) == ["C:c0", "A:a0", "B:b0"]          # by raw score
    # k = 6: quotas 2, 2, 2; C's spare slot goes to a2 -> A 3, B 2, C 1. Relative ranks (r + 0.5) / taken:
    # A 1/6, 1/2, 5/6; B 1/4, 3/4; C 1/2 (a tie with a1: the earlier corpus first)
    assert ids(parse_policy("equal:merge=rank").allocate(cands, 6)) == \
        ["A:a0", "B:b0", "A:a1", "C:c0", "B:b1", "A:a2"]
    two = {"A": cc("a", [0.9, 0.8, 0.7]), "B": cc("b", [0.5, 0.4, 0.3])}
    assert ids(parse_policy("equal").allocate(two, 4)) == ids(parse_policy("fixed:0.5").allocate(two, 4))


def test_redde_walks_the_sample_ranking_to_the_cutoff_and_scales_by_size():
    # Sample ranking: A.9 B.8 B.7 B.6 A.5 B.2 A.1; complete ranks 10, 12, 14, 16 >= 15: stop after B.6.
    est = csi_estimates(csi_case(), 15, redde_weight)
    assert est == pytest.approx({"A": 10.0, "B": 6.0})
    # k = 8: 8 * 10/16 = 5 from A, 3 from B; merged by raw score
    hits = parse_policy("redde:cutoff=15").allocate(csi_case(), 8)
    assert counts(hits) == {"A": 5, "B": 3}
    assert ids(hits) == ["B:b0", "A:a0", "A:a1", "A:a2", "A:a3", "A:a4", "B:b1", "B:b2"]
    assert ids(parse_policy("redde:cutoff=15,merge=rank").allocate(csi_case(), 8))[:4] == \
        ["A:a0", "B:b0", "A:a1", "A:a2"]        # relative ranks 0.1 (A), 0.167 (B), 0.3 (A), 0.5 (A/B: A first)
    # cutoff 10: the walk stops at A.9 alone -> everything to A
    assert counts(parse_policy("redde:cutoff=10").allocate(csi_case(), 8)) == {"A": 8}


def test_crcs_weights_sample_ranks_exponentially():
    est = csi_estimates(csi_case(), 15, crcs_weight(1.0))
    b = 2 * (math.exp(-1) + math.exp(-2) + math.exp(-3))
    assert est == pytest.approx({"A": 10.0, "B": b})
    # k = 8: A 8 * 10 / 11.106 = 7.203, B 0.797 -> floors 7 and 0, the spare slot to the larger remainder (B)
    assert counts(parse_policy("crcs:beta=1,cutoff=15").allocate(csi_case(), 8)) == {"A": 7, "B": 1}
    assert parse_policy("crcs:beta=1,cutoff=15").spec == "crcs:beta=1,cutoff=15"


def test_resource_selection_without_a_sample_uses_the_candidates():
    cands = {"A": cc("a", [0.9, 0.5, 0.4]), "B": cc("b", [0.8, 0.7, 0.6])}
    # candidates as the sample, ratio 1: ranking A.9 B.8 B.7 B.6 ... cutoff 4 -> A 1, B 3
    assert csi_estimates(cands, 4, redde_weight) == {"A": 1.0, "B": 3.0}
    assert counts(parse_policy("redde:cutoff=4").allocate(cands, 4)) == {"A": 1, "B": 3}


def test_coverage_takes_the_largest_softmax_posteriors():
    cands = {"A": cc("a", [0.9, 0.8]), "B": cc("b", [0.85, 0.3])}
    # T = 0.05: p_A = softmax(18, 16) = (0.881, 0.119); p_B = softmax(17, 6) = (0.99998, 0.0000167)
    assert ids(parse_policy("coverage").allocate(cands, 2)) == ["B:b0", "A:a0"]            # ordered by p
    assert ids(parse_policy("coverage:merge=score").allocate(cands, 2)) == ["A:a0", "B:b0"]  # by raw score
    assert ids(parse_policy("coverage").allocate(cands, 3)) == ["B:b0", "A:a0", "A:a1"]
    # T = 1: p_A = softmax(0.9, 0.8) = (0.525, 0.475), p_B = softmax(0.85, 0.3) = (0.634, 0.366)
    assert ids(parse_policy("coverage:t=1").allocate(cands, 3)) == ["B:b0", "A:a0", "A:a1"]


def test_score_fusion_policies_can_keep_their_set_and_order_by_raw_score():
    cands = {"A": cc("a", [0.9, 0.1]), "B": cc("b", [0.5, 0.45])}
    by_z = parse_policy("zscore:source=candidates").allocate(cands, 2)
    by_score = parse_policy("zscore:source=candidates,merge=score").allocate(cands, 2)
    assert sorted(ids(by_z)) == sorted(ids(by_score)) and ids(by_score) == ["A:a0", "B:b0"]
    with pytest.raises(ConfigError, match="unknown merge"):
        parse_policy("fixed:0.5,merge=key")
    with pytest.raises(ConfigError, match="unknown merge"):
        parse_policy("calibrated:merge=best")


def test_sample_view_gives_background_statistics_and_top_sample_scores():
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    sample = np.array([[0.5, 0.1], [0.2, 0.9], [-0.3, 0.4]])
    stats, top = sample_view(q, sample, 2)
    assert top == pytest.approx(np.array([[0.5, 0.2], [0.9, 0.4]]))
    assert stats == pytest.approx(background_stats(q, sample))
    assert stats[0] == pytest.approx([np.mean([0.5, 0.2, -0.3]), np.std([0.5, 0.2, -0.3])])


def _credit(cands, hits, rel, mode="any"):
    judged = [c for c in cands if any(g > 0 for g in rel.get(c, {}).values())]
    total = 0.0
    for c in judged:
        m = sum(1 for h in hits if h.corpus == c)
        total += credit_curve(cands[c], rel[c], mode)[m]
    return total / max(len(judged), 1)


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("mode", ["any", "fraction"])
def test_n_corpus_oracle_equals_brute_force(n, mode):
    rng = np.random.default_rng(n)
    for case in range(40):
        cands = {f"c{i}": cc(f"c{i}-", np.sort(rng.random(int(rng.integers(0, 5))))[::-1]) for i in range(n)}
        rel = {c: {x.ids[j]: 1 for j in range(len(x)) if rng.random() < 0.3} for c, x in cands.items() if len(x)}
        k = int(rng.integers(1, 7))
        total = min(k, sum(len(x) for x in cands.values()))
        best = max(
            sum(credit_curve(cands[c], rel.get(c, {}), mode)[m] for c, m in zip(cands, split))
            for split in itertools.product(*[range(len(x) + 1) for x in cands.values()]) if sum(split) == total)
        judged = sum(1 for c in cands if any(rel.get(c, {}).values()))
        hits = allocate_all(CandidateSet(list(cands), {"q": cands}), f"oracle:mode={mode}", k, {"q": rel})["q"]
        assert len(hits) == total
        assert _credit(cands, hits, rel, mode) == pytest.approx(best / max(judged, 1)), case
