"""Contract tests run over every registered allocation policy (drmix.retrieval.multi.registry).

Every policy: the merged list holds exactly min(k, candidates) hits without repeats, each corpus contributes
a prefix of its own list in its own order, and a policy not registered ``needs_labels`` never reads labels
(judgements that change the oracle's answer leave its answer unchanged, and it never touches them).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from drmix.retrieval.multi import (
    CandidateSet,
    CorpusCandidates,
    allocate_all,
    expand_policy_specs,
    registered_policies,
)

SPECS = [(info.name, spec) for info in registered_policies()
         for spec in expand_policy_specs(info.sweep or (info.name,))]
NEEDS_LABELS = {info.name for info in registered_policies() if info.needs_labels}


def _cset(n_corpora: int, seed: int, *, with_background: bool = True) -> CandidateSet:
    rng = np.random.default_rng(seed)
    names = [f"c{i}" for i in range(n_corpora)]
    by_query = {}
    for q in range(6):
        by_query[f"q{q}"] = {}
        for ci, c in enumerate(names):
            n = int(rng.integers(0, 12)) if ci == n_corpora - 1 else int(rng.integers(3, 12))
            scores = np.sort(rng.normal(0.2 * ci, 0.3, n))[::-1]
            bg = (float(rng.normal(0, 0.1)), 0.2) if with_background else None
            sample = np.sort(rng.normal(0.1 * ci, 0.3, 20))[::-1] if with_background and ci else None  # c0: none
            by_query[f"q{q}"][c] = CorpusCandidates([f"{c}-{i}" for i in range(n)], scores, bg, sample,
                                                    None if sample is None else 50 * (ci + 1), 20)
    return CandidateSet(names, by_query)


def _adversarial_qrels(cset: CandidateSet) -> dict[str, dict[str, dict[str, int]]]:
    """Judge the *last* candidate of every corpus relevant: an answer that reads them changes."""
    return {q: {c: {cc.ids[-1]: 1} for c, cc in by.items() if len(cc)} for q, by in cset.by_query.items()}


class Tripwire(Mapping):
    """Judgements that fail the test if anything reads them."""

    def __getitem__(self, key):
        raise AssertionError(f"a label-free policy read the judgements of {key!r}")

    def __iter__(self):
        raise AssertionError("a label-free policy iterated over the judgements")

    def __len__(self):
        raise AssertionError("a label-free policy asked how many judgements there are")

    def get(self, key, default=None):
        raise AssertionError(f"a label-free policy read the judgements of {key!r}")


def test_every_policy_is_covered():
    names = {n for n, _ in SPECS}
    assert {"naive", "fixed", "confidence", "zscore", "calibrated", "oracle"} <= names


@pytest.mark.parametrize("n_corpora", [2, 3])
@pytest.mark.parametrize("name,spec", SPECS, ids=[s for _, s in SPECS])
def test_budget_respected_exactly_and_prefixes_kept(name, spec, n_corpora):
    cset = _cset(n_corpora, seed=n_corpora)
    qrels = _adversarial_qrels(cset)
    for k in (1, 3, 10, 40):
        run = allocate_all(cset, spec, k, qrels, reference=_cset(n_corpora, seed=99))
        for q, hits in run.items():
            total = sum(len(cc) for cc in cset.by_query[q].values())
            assert len(hits) == min(k, total), (spec, k, q)
            assert len({(h.corpus, h.doc_id) for h in hits}) == len(hits)
            for c, cc in cset.by_query[q].items():
                kept = [h.doc_id for h in hits if h.corpus == c]
                assert sorted(kept, key=cc.ids.index) == cc.ids[:len(kept)]  # a prefix of the corpus's list
                ranks = [cc.ids.index(d) for d in kept]
                assert ranks == sorted(ranks)                                 # in the corpus's own order
                for h in hits:
                    if h.corpus == c:
                        assert h.score == pytest.approx(cc.scores[cc.ids.index(h.doc_id)])  # raw similarity


@pytest.mark.parametrize("n_corpora", [2, 3])
@pytest.mark.parametrize("name,spec", [s for s in SPECS if s[0] not in NEEDS_LABELS],
                         ids=[s for n, s in SPECS if n not in NEEDS_LABELS])
def test_label_free_policies_never_read_labels(name, spec, n_corpora):
    cset = _cset(n_corpora, seed=7)
    reference = _cset(n_corpora, seed=8)
    qrels = _adversarial_qrels(cset)
    k = 4
    oracle_run = allocate_all(cset, "oracle", k, qrels)
    plain = allocate_all(cset, spec, k, None, reference=reference)
    assert oracle_run != plain or spec.startswith("naive")   # these judgements change what reads them
    assert allocate_all(cset, spec, k, qrels, reference=reference) == plain
    assert allocate_all(cset, spec, k, Tripwire(), reference=reference) == plain
    policy_run = {q: [(h.corpus, h.doc_id) for h in hits] for q, hits in plain.items()}
    assert policy_run == {q: [(h.corpus, h.doc_id) for h in hits]
                          for q, hits in allocate_all(cset, spec, k, None, reference=reference).items()}


@pytest.mark.parametrize("name", sorted(NEEDS_LABELS))
def test_policies_needing_labels_are_refused_without_them(name):
    from drmix.errors import ConfigError

    with pytest.raises(ConfigError, match="judgements"):
        allocate_all(_cset(2, seed=1), name, 3)
