"""Multi-corpus retrieval: one top-k budget spread over several corpora, some unseen in training.

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 4.2 "Allocation Strategies" and section 5. A query is answered from several corpora
``D_1 .. D_n`` (``D_1`` is the one the encoder was fine-tuned on); each corpus has its own FAISS index;
the retriever fetches the top ``depth`` candidates of every corpus once and an *allocation policy*
turns those per-corpus sorted lists into one merged top-k list.

Policies (functions of the candidate lists of one query -- ``calibrated`` also of statistics fitted on other
queries' scores, never labels; ``parse_policy`` builds them by name). Each is one module of
:mod:`drmix.retrieval.multi.policies` that registers itself (:mod:`drmix.retrieval.multi.registry`):

* ``naive`` -- the paper's naive merging: one list ordered by raw similarity.
* ``fixed:F`` / ``fixed:F1,F2,...`` -- fixed-fractional allocation: ``k_1 = round(F k)`` from the first
  corpus, the rest from the second; with more corpora one fraction per corpus (normalised to sum 1) and
  largest-remainder rounding so that the quotas sum to exactly ``k``. ``round`` is half-up
  (``fixed:0.25`` at ``k = 10`` takes 3 from the first corpus); remainders that tie go to the earlier corpus.
* ``confidence:P`` -- confidence (nucleus) allocation: ``p_i = softmax(s_i / T)`` over the first (seen)
  corpus's top-``N`` scores; take the smallest ``m`` seen-corpus passages with ``sum_{i<=m} p_i >= P``
  (capped at ``k``), the rest of the budget from the other corpora. The paper's footnote 2 computes the
  softmax over ``N >> k`` retrieved scores; it does not state the temperature. We use ``N = 100`` and
  ``T = 0.05`` by default (the InfoNCE temperature the encoder is trained with, on which its scores are a
  calibrated softmax); both are parameters: ``confidence:0.9,temperature=0.1,depth=50``. With more than
  two corpora the remaining budget goes to the unseen corpora by raw score.
* ``zscore`` -- beyond the paper, label-free calibration: each corpus's scores for the query are
  standardised, ``z = (s - mu_{c,q}) / sigma_{c,q}``, and the lists are merged by ``z``. The statistics come
  from the query's scores against a seeded random sample of the corpus (its *background*) when the
  retriever supplies one, else from the query's top-``depth`` candidates of that corpus
  (``zscore:source=candidates`` forces the latter). Needs no labels and no tuning.
* ``calibrated`` -- beyond the paper, label-free score-level fusion: ``z`` as for ``zscore`` (query against
  corpus background), then per corpus the percentile of ``z`` among the ``z`` values of the top-``k``
  candidates that *other* (reference) queries get from that corpus; the lists are merged by that value.
  See :class:`CalibratedPolicy`. (``rrf`` was removed: with one ranked list per corpus reciprocal rank
  fusion is round-robin whatever its ``K``, i.e. ``fixed:0.5`` with two corpora ordered by rank.)
* ``oracle`` -- analysis only, needs relevance judgements: per query, the split ``(k_1..k_n)`` of the
  budget that maximises per-corpus credit recall (``drmix.evaluation.multi``), found exactly by
  dynamic programming over corpora; among optimal splits it prefers the one with the largest sum of
  raw scores (what naive merging would keep). ``oracle:mode=fraction`` optimises the fraction credit (the
  sweep picks the mode matching ``--credit``). Every other policy here keeps a prefix of each corpus's
  list, so the oracle's recall is never below theirs in the same credit mode.

Common rules (documented behaviour, tested):

* Every policy keeps a *prefix* of each corpus's candidate list (the order within a corpus is never changed).
* Quota policies (``fixed``, ``confidence``, ``oracle``) cap each quota at the corpus's candidate count;
  budget a corpus cannot use (fewer candidates than its quota, ``k`` above the fetch ``depth``, or an empty
  corpus) goes to the best remaining candidates of the other corpora by raw score. An empty corpus
  directory is allowed and contributes no candidates.
* The merged list is ordered by the policy's key: raw score for ``naive`` and the quota policies, ``z`` for
  ``zscore``, the calibrated value for ``calibrated``. Ties are broken deterministically by corpus order (the order the
  corpora were given in) and then by rank within the corpus.

Departures from the paper: the paper handles two corpora and leaves the ordering of the merged list
unspecified; here any number of corpora is allowed and the ordering is as above.

Layout: ``types`` (Hit, CorpusCandidates, CandidateSet), ``base`` (the policy interface), ``registry``
(registration, parsing, help, sweep grammar), ``merge`` (quota and merge helpers), ``policies/`` (one
module per policy), ``apply`` (a policy over many queries), ``retriever`` (indexes, candidates,
:func:`multi_search`).
"""
from __future__ import annotations

from drmix.retrieval.multi.apply import allocate_all
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import fill_quotas, largest_remainder
from drmix.retrieval.multi.registry import (
    PolicyInfo,
    default_policy_specs,
    expand_policy_specs,
    load_policies,
    parse_policy,
    policy_help,
    policy_info,
    register_policy,
    registered_policies,
)
from drmix.retrieval.multi.retriever import (
    EmptyIndex,
    MultiCorpusRetriever,
    background_stats,
    multi_search,
    parse_corpus_args,
    sample_rows,
)
from drmix.retrieval.multi.types import (
    CandidateSet,
    CorpusCandidates,
    Hit,
    QueryCandidates,
    Relevant,
    candidates_from_lists,
)

load_policies()

from drmix.retrieval.multi.policies.calibrated import RRF_REMOVED, CalibratedPolicy  # noqa: E402
from drmix.retrieval.multi.policies.confidence import ConfidencePolicy, softmax_mass_count  # noqa: E402
from drmix.retrieval.multi.policies.fixed import FixedPolicy  # noqa: E402
from drmix.retrieval.multi.policies.naive import NaivePolicy  # noqa: E402
from drmix.retrieval.multi.policies.oracle import OraclePolicy, credit_curve  # noqa: E402
from drmix.retrieval.multi.policies.zscore import ZScorePolicy, zscores  # noqa: E402

__all__ = [
    "AllocationPolicy", "CalibratedPolicy", "CandidateSet", "ConfidencePolicy", "CorpusCandidates", "EmptyIndex",
    "FixedPolicy", "Hit", "MultiCorpusRetriever", "NaivePolicy", "OraclePolicy", "PolicyInfo", "QueryCandidates",
    "RRF_REMOVED", "Relevant", "ZScorePolicy", "allocate_all", "background_stats", "candidates_from_lists",
    "credit_curve", "default_policy_specs", "expand_policy_specs", "fill_quotas", "largest_remainder",
    "load_policies", "multi_search", "parse_corpus_args", "parse_policy", "policy_help", "policy_info",
    "register_policy", "registered_policies", "sample_rows", "softmax_mass_count", "zscores",
]
