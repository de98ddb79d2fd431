"""Allocation policies against hand-computed top-k lists (drmix.retrieval.multi)."""
from __future__ import annotations

import numpy as np
import pytest

from drmix.errors import ConfigError
from drmix.retrieval.multi import (
    CandidateSet,
    CorpusCandidates,
    allocate_all,
    candidates_from_lists,
    expand_policy_specs,
    largest_remainder,
    parse_policy,
    softmax_mass_count,
)


def two():
    # Seen corpus A scores higher overall; B is the unseen corpus.
    return candidates_from_lists({
        "A": [("a1", 0.9), ("a2", 0.8), ("a3", 0.7), ("a4", 0.6), ("a5", 0.5)],
        "B": [("b1", 0.65), ("b2", 0.55), ("b3", 0.4)],
    })


def ids(hits):
    return [f"{h.corpus}:{h.doc_id}" for h in hits]


def run(spec, cands, k, relevant=None):
    return ids(parse_policy(spec).allocate(cands, k, relevant))


def test_naive_merges_by_raw_score():
    assert run("naive", two(), 4) == ["A:a1", "A:a2", "A:a3", "B:b1"]


def test_fixed_half_takes_two_from_each_and_orders_by_score():
    assert run("fixed:0.5", two(), 4) == ["A:a1", "A:a2", "B:b1", "B:b2"]


def test_fixed_rounds_half_up():
    # 0.25 * 4 = 1 from A, 3 from B.
    assert run("fixed:0.25", two(), 4) == ["A:a1", "B:b1", "B:b2", "B:b3"]
    # 0.3 * 5 = 1.5 -> 2 from A, 3 from B.
    assert run("fixed:0.3", two(), 5) == ["A:a1", "A:a2", "B:b1", "B:b2", "B:b3"]
    # 0.3 * 10 is 3.0000000000000004 in floating point: still exactly 3.
    assert largest_remainder(10, [0.3, 0.7]) == [3, 7]


def test_fixed_leftover_budget_goes_to_other_corpus_when_k_exceeds_a_corpus():
    # fixed:0.0 asks 5 of B, which has 3; the 2 left go to the best remaining candidates (A's top 2).
    assert run("fixed:0.0", two(), 5) == ["A:a1", "A:a2", "B:b1", "B:b2", "B:b3"]
    # fixed:0.5 at k=8: quotas 4/4, B has 3 -> A gives 5.
    assert run("fixed:0.5", two(), 8) == ["A:a1", "A:a2", "A:a3", "B:b1", "A:a4", "B:b2", "A:a5", "B:b3"]


def test_k_larger_than_all_candidates_returns_everything():
    for spec in ("naive", "fixed:0.7", "confidence:0.5", "zscore", "calibrated", "calibrated:method=gauss"):
        assert len(run(spec, two(), 20)) == 8


def test_ties_break_by_corpus_order_then_rank():
    cands = candidates_from_lists({"A": [("x", 0.5), ("y", 0.5)], "B": [("z", 0.5)]})
    assert run("naive", cands, 2) == ["A:x", "A:y"]
    flipped = {"B": cands["B"], "A": cands["A"]}
    assert run("naive", flipped, 2) == ["B:z", "A:x"]
    # The merged order of a fixed split also breaks the tie by corpus order.
    assert run("fixed:0.5", cands, 2) == ["A:x", "B:z"]


def test_empty_corpus_gives_its_budget_to_the_others():
    cands = {"A": CorpusCandidates([], np.zeros(0)),
             "B": CorpusCandidates(["b1", "b2", "b3"], np.array([0.3, 0.2, 0.1]))}
    assert run("fixed:0.5", cands, 2) == ["B:b1", "B:b2"]
    assert run("confidence:0.9", cands, 2) == ["B:b1", "B:b2"]
    assert run("naive", cands, 2) == ["B:b1", "B:b2"]
    assert run("zscore", cands, 2) == ["B:b1", "B:b2"]
    assert run("calibrated", cands, 2) == ["B:b1", "B:b2"]


def test_three_corpora_fractions_and_largest_remainder():
    assert largest_remainder(10, [0.5, 0.3, 0.2]) == [5, 3, 2]
    assert largest_remainder(4, [0.5, 0.3, 0.2]) == [2, 1, 1]     # 2.0, 1.2, 0.8 -> remainder to C
    assert largest_remainder(3, [0.5, 0.3, 0.2]) == [1, 1, 1]     # 1.5, 0.9, 0.6 -> B and C
    cands = candidates_from_lists({
        "A": [("a1", 0.9), ("a2", 0.8), ("a3", 0.7)],
        "B": [("b1", 0.6), ("b2", 0.5)],
        "C": [("c1", 0.3), ("c2", 0.2)],
    })
    assert run("fixed:0.5,0.3,0.2", cands, 4) == ["A:a1", "A:a2", "B:b1", "C:c1"]
    # One fraction with three corpora: the rest is split evenly (0.5, 0.25, 0.25 of 4 = 2, 1, 1).
    assert run("fixed:0.5", cands, 4) == ["A:a1", "A:a2", "B:b1", "C:c1"]
    with pytest.raises(ConfigError):
        run("fixed:0.5,0.5", cands, 4)


def test_softmax_mass_count_by_hand():
    # softmax([1.0, 0.9, 0.0] / 0.1) = e^10, e^9, e^0 over their sum = 0.7311, 0.2689, 0.00003
    s = np.array([1.0, 0.9, 0.0])
    assert softmax_mass_count(s, 0.7, 0.1) == 1
    assert softmax_mass_count(s, 0.9, 0.1) == 2
    assert softmax_mass_count(s, 0.99999, 0.1) == 3
    assert softmax_mass_count(s, 1.0, 0.1) == 3


def test_confidence_takes_seen_until_mass_then_the_rest():
    cands = candidates_from_lists({
        "A": [("a1", 1.0), ("a2", 0.9), ("a3", 0.0)],
        "B": [("b1", 0.2), ("b2", 0.1), ("b3", 0.05)],
    })
    assert run("confidence:0.9,temperature=0.1", cands, 4) == ["A:a1", "A:a2", "B:b1", "B:b2"]
    assert run("confidence:0.7,temperature=0.1", cands, 4) == ["A:a1", "B:b1", "B:b2", "B:b3"]
    # Flat scores at a high temperature: the mass grows slowly, the seen quota is capped at k.
    assert run("confidence:0.99,temperature=100", cands, 2) == ["A:a1", "A:a2"]
    # depth=1: the softmax over one score is 1, so one passage from A.
    assert run("confidence:0.9,temperature=0.1,depth=1", cands, 3) == ["A:a1", "B:b1", "B:b2"]


def test_zscore_from_candidates_by_hand():
    cands = candidates_from_lists({"A": [("a1", 0.9), ("a2", 0.8), ("a3", 0.7)],
                                   "B": [("b1", 0.5), ("b2", 0.2), ("b3", 0.2)]})
    # A: mean 0.8, std 0.0816 -> z 1.22, 0, -1.22.  B: mean 0.3, std 0.1414 -> z 1.41, -0.71, -0.71.
    assert run("zscore", cands, 3) == ["B:b1", "A:a1", "A:a2"]
    hits = parse_policy("zscore").allocate(cands, 3)
    assert hits[0].score == pytest.approx(0.5)   # hits keep the raw score


def test_zscore_uses_background_statistics_when_given():
    cands = candidates_from_lists({"A": [("a1", 0.9), ("a2", 0.8), ("a3", 0.7)],
                                   "B": [("b1", 0.5), ("b2", 0.2), ("b3", 0.2)]})
    cands["A"].background = (0.5, 0.1)   # z: 4, 3, 2
    cands["B"].background = (0.05, 0.1)  # z: 4.5, 1.5, 1.5
    assert run("zscore", cands, 3) == ["B:b1", "A:a1", "A:a2"]
    assert run("zscore", cands, 4) == ["B:b1", "A:a1", "A:a2", "A:a3"]
    # source=candidates ignores the background.
    assert run("zscore:source=candidates", cands, 2) == ["B:b1", "A:a1"]


def test_rrf_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="round-robin") as ei:
        parse_policy("rrf:60")
    assert "fixed:0.5" in ei.value.fix


def _bg(lists, backgrounds):
    cands = candidates_from_lists(lists)
    for c, bg in backgrounds.items():
        cands[c].background = bg
    return cands


def _calibration_case():
    # Query (binary-exact values): A z = (1-0.5)/0.125, (0.875-0.5)/0.125 = 4, 3;  B z = 4, 2.
    query = _bg({"A": [("a1", 1.0), ("a2", 0.875)], "B": [("b1", 0.625), ("b2", 0.375)]},
                {"A": (0.5, 0.125), "B": (0.125, 0.125)})
    # Reference queries (background 0, 1 so z = score): top-2 z of A {7, 6, 5, 3}, of B {3.5, 3, 2, 1}.
    ref = CandidateSet(["A", "B"], {
        "r1": _bg({"A": [("x", 7.0), ("y", 6.0), ("z", 0.0)], "B": [("u", 3.5), ("v", 3.0)]}, {"A": (0, 1), "B": (0, 1)}),
        "r2": _bg({"A": [("x", 5.0), ("y", 3.0)], "B": [("u", 2.0), ("v", 1.0), ("w", -9.0)]}, {"A": (0, 1), "B": (0, 1)}),
    })
    return query, ref


def test_calibrated_ecdf_against_reference_queries_by_hand():
    query, ref = _calibration_case()
    # zscore ties at z = 4 and keeps A first; A's z 4 is low for A (percentile (1+1)/8 = 0.25, z 3 -> 1/8)
    # while B's z 4 is above all of B's reference (8/8 = 1.0; z 2 -> (1+2)/8 = 0.375).
    assert run("zscore", query, 3) == ["A:a1", "B:b1", "A:a2"]
    policy = parse_policy("calibrated").fit(ref, 2)
    np.testing.assert_allclose(policy.reference["A"], [3, 5, 6, 7])
    np.testing.assert_allclose(policy.keys("A", query["A"], 2), [0.25, 0.125], atol=1e-6)
    np.testing.assert_allclose(policy.keys("B", query["B"], 2), [1.0, 0.375], atol=1e-6)
    assert ids(policy.allocate(query, 3)) == ["B:b1", "B:b2", "A:a1"]
    out = allocate_all(CandidateSet(["A", "B"], {"q": query}), "calibrated", 3, reference=ref)
    assert ids(out["q"]) == ["B:b1", "B:b2", "A:a1"]
    assert out["q"][0].score == pytest.approx(0.625)          # hits keep the raw score


def test_calibrated_gauss_by_hand():
    query, ref = _calibration_case()
    policy = parse_policy("calibrated:method=gauss").fit(ref, 2)
    # A reference mean 5.25, std sqrt(2.1875); B mean 2.375, std sqrt(0.921875).
    np.testing.assert_allclose(policy.keys("A", query["A"], 2),
                               [(4 - 5.25) / 2.1875 ** 0.5, (3 - 5.25) / 2.1875 ** 0.5])
    np.testing.assert_allclose(policy.keys("B", query["B"], 2),
                               [(4 - 2.375) / 0.921875 ** 0.5, (2 - 2.375) / 0.921875 ** 0.5])
    assert ids(policy.allocate(query, 4)) == ["B:b1", "B:b2", "A:a1", "A:a2"]
    # ref=1 pools only the top candidate of each reference query: A {7, 5}, B {3.5, 2}.
    p1 = parse_policy("calibrated:ref=1").fit(ref, 2)
    np.testing.assert_allclose(p1.reference["B"], [2.0, 3.5])


def test_calibrated_without_reference_uses_the_query_itself():
    query, _ = _calibration_case()
    # Own top-2: A {3, 4}: z 4 -> 0.75, z 3 -> 0.25; B {2, 4}: 0.75, 0.25. Equal percentiles break by z.
    assert ids(parse_policy("calibrated").allocate(query, 4)) == ["A:a1", "B:b1", "A:a2", "B:b2"]
    # allocate_all with no reference fits on the allocated queries (label-free, transductive).
    cset = CandidateSet(["A", "B"], {"q": query})
    assert ids(allocate_all(cset, "calibrated", 4)["q"]) == ["A:a1", "B:b1", "A:a2", "B:b2"]


def test_oracle_by_hand():
    rel = {"A": {"a3": 1}, "B": {"b2": 1}}
    # k=5: 3 from A and 2 from B retrieve both relevant passages (naive gets only a3).
    assert run("oracle", two(), 5, rel) == ["A:a1", "A:a2", "A:a3", "B:b1", "B:b2"]
    assert run("naive", two(), 5) == ["A:a1", "A:a2", "A:a3", "B:b1", "A:a4"]
    # k=4: only one corpus can be served; among the splits with credit 0.5, (3,1) has the largest score sum.
    assert run("oracle", two(), 4, rel) == ["A:a1", "A:a2", "A:a3", "B:b1"]
    with pytest.raises(ConfigError):
        run("oracle", two(), 4, None)


def test_unsorted_candidates_are_sorted():
    cc = CorpusCandidates(["x", "y", "z"], np.array([0.1, 0.9, 0.5]))
    assert cc.ids == ["y", "z", "x"]


@pytest.mark.parametrize("spec,canon", [
    ("naive", "naive"), ("fixed:0.50", "fixed:0.5"), ("fixed:0.5,0.3,0.2", "fixed:0.5,0.3,0.2"),
    ("confidence:0.9", "confidence:0.9,temperature=0.05,depth=100"),
    ("confidence:0.8,temperature=0.1,depth=20", "confidence:0.8,temperature=0.1,depth=20"),
    ("zscore", "zscore"), ("zscore:source=candidates", "zscore:source=candidates"),
    ("calibrated", "calibrated"), ("calibrated:method=gauss,ref=20", "calibrated:method=gauss,ref=20"),
    ("calibrated:ecdf", "calibrated"), ("oracle", "oracle"), ("oracle:mode=fraction", "oracle:mode=fraction"),
    (" Fixed:1 ", "fixed:1"),
])
def test_parse_policy_round_trips(spec, canon):
    p = parse_policy(spec)
    assert p.spec == canon
    assert parse_policy(p.spec).spec == canon


@pytest.mark.parametrize("bad", ["magic", "fixed", "fixed:abc", "fixed:1.5", "confidence:2", "naive:3",
                                 "zscore:source=nope", "confidence:0.9,foo=1", "oracle:mode=x", "rrf",
                                 "calibrated:method=x", "calibrated:ref=0"])
def test_parse_policy_rejects_bad_specs(bad):
    with pytest.raises(ConfigError):
        parse_policy(bad)


def test_expand_policy_ranges():
    assert expand_policy_specs(["fixed:0.0..1.0"]) == [f"fixed:{x:g}" for x in
                                                       (0, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1)]
    assert expand_policy_specs(["fixed:0..1/0.5", "naive"]) == ["fixed:0", "fixed:0.5", "fixed:1", "naive"]
    assert expand_policy_specs(["confidence:0.1..0.9/0.2"]) == [f"confidence:{p}" for p in (0.1, 0.3, 0.5, 0.7, 0.9)]
    with pytest.raises(ConfigError):
        expand_policy_specs(["fixed:1..0"])


def test_allocate_all_and_reorder_make_the_first_corpus_the_seen_one():
    cset = CandidateSet(["A", "B"], {"q1": two()})
    out = allocate_all(cset, "fixed:0.25", 4)
    assert ids(out["q1"]) == ["A:a1", "B:b1", "B:b2", "B:b3"]
    out_b = allocate_all(cset.reorder("B"), "fixed:0.25", 4)   # now 1 from B, 3 from A
    assert ids(out_b["q1"]) == ["A:a1", "A:a2", "A:a3", "B:b1"]
    with pytest.raises(ConfigError):
        cset.reorder("C")
    with pytest.raises(ConfigError):
        allocate_all(cset, "naive", 0)


def _random_instance(rng):
    n_corpora = int(rng.integers(1, 4))
    cands, rel = {}, {}
    for c in range(n_corpora):
        n = int(rng.integers(0, 9))
        scores = np.round(np.sort(rng.uniform(-1, 1, n))[::-1] + (0.3 if c == 0 else 0.0), 1)  # ties likely
        name = f"C{c}"
        cands[name] = CorpusCandidates([f"d{i}" for i in range(n)], scores)
        if rng.random() < 0.3:
            cands[name].background = (float(rng.uniform(-1, 1)), float(rng.uniform(0.01, 1)))
        rel[name] = {f"d{i}": 1 for i in range(n + 2) if rng.random() < 0.25}   # some relevant ones not retrieved
    return cands, rel


def test_oracle_is_never_below_any_policy_and_every_policy_keeps_prefixes():
    from drmix.evaluation.multi import query_credit

    rng = np.random.default_rng(0)
    specs = ["naive", "fixed:0", "fixed:0.3", "fixed:0.5", "fixed:1", "confidence:0.9", "confidence:0.5,temperature=1",
             "zscore", "zscore:source=candidates", "calibrated", "calibrated:method=gauss"]
    checked = 0
    for _ in range(300):
        cands, rel = _random_instance(rng)
        k = int(rng.integers(1, 11))
        oracle = parse_policy("oracle").allocate(cands, k, rel)
        best = query_credit(oracle, rel, k)
        total = sum(len(c) for c in cands.values())
        assert len(oracle) == min(k, total)
        for spec in specs:
            hits = parse_policy(spec).allocate(cands, k)
            assert len(hits) == min(k, total), spec
            for name, cc in cands.items():   # a prefix of every corpus's list
                got = [h.doc_id for h in hits if h.corpus == name]
                assert sorted(got, key=cc.ids.index) == cc.ids[:len(got)], spec
            credit = query_credit(hits, rel, k)
            if best is None:
                assert credit is None
            else:
                assert credit <= best + 1e-12, (spec, k, cands, rel)
                checked += 1
    assert checked > 1000


# --------------------------------------------------------------------------------------------------
# The oracle equals a brute-force search over every split of the budget, in both credit modes
# --------------------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _all_splits(sizes, total):
    if not sizes:
        if total == 0:
            yield ()
        return
    for m in range(0, min(sizes[0], total) + 1):
        for rest in _all_splits(sizes[1:], total - m):
            yield (m, *rest)


@st.composite
def instances(draw):
    n_corpora = draw(st.integers(1, 3))
    cands, rel = {}, {}
    for c in range(n_corpora):
        n = draw(st.integers(0, 6))
        scores = sorted(draw(st.lists(st.sampled_from([-0.5, 0.0, 0.2, 0.5, 0.9]), min_size=n, max_size=n)),
                        reverse=True)
        cands[f"C{c}"] = CorpusCandidates([f"d{i}" for i in range(n)], np.array(scores, dtype=np.float64))
        # relevant ids may lie beyond the retrieved list (d6, d7): then "fraction" credit stays below 1
        rel[f"C{c}"] = {f"d{i}": 1 for i in draw(st.sets(st.integers(0, 7), max_size=4))}
    return cands, rel, draw(st.integers(1, 14)), draw(st.sampled_from(["any", "fraction"]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(instances())
def test_oracle_equals_brute_force_over_all_splits(inst):
    from drmix.evaluation.multi import query_credit
    from drmix.retrieval.multi import fill_quotas

    cands, rel, k, mode = inst
    names = list(cands)
    total = min(k, sum(len(c) for c in cands.values()))
    best = None
    for split in _all_splits([len(cands[c]) for c in names], total):
        credit = query_credit(fill_quotas(cands, dict(zip(names, split)), k), rel, k, mode)
        best = credit if best is None or (credit is not None and credit > best) else best
    hits = parse_policy(f"oracle:mode={mode}").allocate(cands, k, rel)
    assert len(hits) == total
    got = query_credit(hits, rel, k, mode)
    if best is None:
        assert got is None
    else:
        assert got == pytest.approx(best, abs=1e-9)
