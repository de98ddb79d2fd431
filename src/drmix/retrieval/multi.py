"""Multi-corpus retrieval: one top-k budget spread over several corpora, some unseen in training.

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 4.2 "Allocation Strategies" and section 5. A query is answered from several corpora
``D_1 .. D_n`` (``D_1`` is the one the encoder was fine-tuned on); each corpus has its own FAISS index;
the retriever fetches the top ``depth`` candidates of every corpus once and an *allocation policy*
turns those per-corpus sorted lists into one merged top-k list.

Policies (functions of the candidate lists of one query -- ``calibrated`` also of statistics fitted on other
queries' scores, never labels; ``parse_policy`` builds them by name):

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
  budget that maximises per-corpus credit recall (``drmix.evaluation.multi_metrics``), found exactly by
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
"""
from __future__ import annotations

import abc
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import ConfigError, DataError

log = logging.getLogger(__name__)

_EPS = 1e-9


# --------------------------------------------------------------------------------------------------
# Data structures
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its corpus, its id in that corpus, and its raw similarity score."""

    corpus: str
    doc_id: str
    score: float


@dataclass
class CorpusCandidates:
    """The top candidates of one corpus for one query, sorted by score (descending).

    ``background`` is ``(mean, std)`` of the query's scores over a random sample of the corpus, when
    known (used by ``zscore``). Unsorted input is stable-sorted on construction.
    """

    ids: list[str]
    scores: np.ndarray
    background: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        self.ids = [str(i) for i in self.ids]
        self.scores = np.asarray(self.scores, dtype=np.float64).reshape(-1)
        if len(self.ids) != len(self.scores):
            raise ValueError(f"{len(self.ids)} ids but {len(self.scores)} scores")
        if len(self.scores) > 1 and np.any(np.diff(self.scores) > 0):
            order = np.argsort(-self.scores, kind="stable")
            self.ids = [self.ids[i] for i in order]
            self.scores = self.scores[order]

    def __len__(self) -> int:
        return len(self.ids)


QueryCandidates = Mapping[str, CorpusCandidates]   # corpus name -> candidates, in corpus order
Relevant = Mapping[str, Mapping[str, int]]          # corpus name -> {doc id: grade}


def candidates_from_lists(lists: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, CorpusCandidates]:
    """Build a query's candidates from ``{corpus: [(doc_id, score), ...]}`` (a convenience for tests/users)."""
    return {c: CorpusCandidates([d for d, _ in pairs], np.array([s for _, s in pairs], dtype=np.float64))
            for c, pairs in lists.items()}


# --------------------------------------------------------------------------------------------------
# Shared allocation helpers
# --------------------------------------------------------------------------------------------------


def _merge(cands: QueryCandidates, take: Mapping[str, int], keys: Mapping[str, np.ndarray]) -> list[Hit]:
    """Merge the first ``take[c]`` candidates of each corpus ordered by ``keys`` (desc), ties by corpus, rank."""
    rows: list[tuple[float, int, int, Hit]] = []
    for ci, (name, cc) in enumerate(cands.items()):
        for r in range(min(take.get(name, 0), len(cc))):
            rows.append((-float(keys[name][r]), ci, r, Hit(name, cc.ids[r], float(cc.scores[r]))))
    rows.sort(key=lambda t: t[:3])
    return [t[3] for t in rows]


def _top_by_key(cands: QueryCandidates, keys: Mapping[str, np.ndarray], k: int,
                start: Mapping[str, int] | None = None) -> dict[str, int]:
    """How many of each corpus the best ``k`` candidates by ``keys`` (after ``start[c]``) contain."""
    start = start or {}
    rows = []
    for ci, (name, cc) in enumerate(cands.items()):
        s0 = start.get(name, 0)
        for r in range(s0, min(len(cc), s0 + max(k, 0))):   # no corpus can give more than k
            rows.append((-float(keys[name][r]), ci, r, name))
    rows.sort(key=lambda t: t[:3])
    counts = {name: start.get(name, 0) for name in cands}
    for t in rows[:max(k, 0)]:
        counts[t[3]] += 1
    return counts


def _raw_keys(cands: QueryCandidates) -> dict[str, np.ndarray]:
    return {c: cc.scores for c, cc in cands.items()}


def fill_quotas(cands: QueryCandidates, quotas: Mapping[str, int], k: int) -> list[Hit]:
    """Take ``quotas[c]`` from each corpus (capped at its size); leftover budget goes by raw score; merge by score."""
    take = {c: min(max(int(quotas.get(c, 0)), 0), len(cc)) for c, cc in cands.items()}
    used = sum(take.values())
    if used > k:
        raise ValueError(f"quotas {dict(quotas)} exceed k={k}")
    if used < k:
        take = _top_by_key(cands, _raw_keys(cands), k - used, start=take)
    return _merge(cands, take, _raw_keys(cands))


def largest_remainder(k: int, fractions: Sequence[float]) -> list[int]:
    """Integer quotas summing to ``k`` proportional to ``fractions`` (Hamilton's method).

    Remainders are compared after rounding to 9 decimals (so ``0.3 * 10`` is exactly 3) and ties go to
    the earlier position, which makes two corpora follow ``k_1 = round_half_up(f k)``.
    """
    f = np.asarray(fractions, dtype=np.float64)
    if f.size == 0:
        return []
    if np.any(f < 0) or f.sum() <= 0:
        raise ConfigError(f"fractions must be non-negative and not all zero, got {list(fractions)}.",
                          fix="e.g. fixed:0.5 or fixed:0.5,0.3,0.2.")
    exact = np.round(f / f.sum() * k, 9)
    base = np.floor(exact).astype(int)
    rest = k - int(base.sum())
    order = sorted(range(len(f)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:rest]:
        base[i] += 1
    return [int(b) for b in base]


# --------------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------------


class AllocationPolicy(abc.ABC):
    """Turns the per-corpus candidates of one query into a merged top-k list of :class:`Hit`."""

    name = "policy"
    needs_relevance = False
    needs_reference = False

    def fit(self, reference: "CandidateSet", k: int) -> "AllocationPolicy":
        """Learn label-free statistics from a reference candidate set (only ``calibrated`` does)."""
        return self

    @abc.abstractmethod
    def allocate(self, cands: QueryCandidates, k: int, relevant: Relevant | None = None) -> list[Hit]:
        """The merged top-``k`` for one query (``relevant``: qrels of the query, for the oracle only)."""

    @property
    def spec(self) -> str:
        """The string that :func:`parse_policy` turns back into this policy."""
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec}>"


class NaivePolicy(AllocationPolicy):
    """Merge all corpora by raw score (the paper's naive merging)."""

    name = "naive"

    def allocate(self, cands, k, relevant=None):
        keys = _raw_keys(cands)
        return _merge(cands, _top_by_key(cands, keys, k), keys)


@dataclass(repr=False)
class FixedPolicy(AllocationPolicy):
    """Fixed-fractional allocation: a fixed share of ``k`` per corpus (one fraction = first corpus's share)."""

    fractions: tuple[float, ...] = (0.5,)
    name = "fixed"

    def __post_init__(self) -> None:
        if any(f < 0 for f in self.fractions) or (len(self.fractions) == 1 and self.fractions[0] > 1):
            raise ConfigError(f"invalid fixed fractions {self.fractions}.",
                              fix="use fractions in [0, 1], e.g. fixed:0.5 or fixed:0.5,0.3,0.2.")

    def quotas(self, names: Sequence[str], k: int) -> dict[str, int]:
        n = len(names)
        if n == 0:
            return {}
        if len(self.fractions) == 1:  # the first corpus's share; the rest split evenly over the others
            f = self.fractions[0]
            fr = [f] + [(1.0 - f) / (n - 1)] * (n - 1) if n > 1 else [1.0]
        elif len(self.fractions) == n:
            fr = list(self.fractions)
        else:
            raise ConfigError(f"fixed allocation has {len(self.fractions)} fractions for {n} corpora.",
                              fix="give one fraction (the first corpus's share) or one per corpus.")
        if sum(fr) <= 0:
            fr = [1.0] * n
        return dict(zip(names, largest_remainder(k, fr)))

    def allocate(self, cands, k, relevant=None):
        return fill_quotas(cands, self.quotas(list(cands), k), k)

    @property
    def spec(self) -> str:
        return "fixed:" + ",".join(f"{f:g}" for f in self.fractions)


def softmax_mass_count(scores: np.ndarray, p: float, temperature: float) -> int:
    """Smallest ``m`` with ``sum_{i<m} softmax(scores / T)_i >= p`` (scores sorted descending)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return 0
    z = s / temperature
    z = np.exp(z - z.max())
    cum = np.cumsum(z / z.sum())
    return int(min(np.searchsorted(cum, p - 1e-12) + 1, s.size))


@dataclass(repr=False)
class ConfidencePolicy(AllocationPolicy):
    """Confidence (nucleus) allocation from the first corpus: stop when its softmax mass reaches ``p``."""

    p: float = 0.9
    temperature: float = 0.05
    depth: int = 100
    name = "confidence"

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0 or self.temperature <= 0 or self.depth < 1:
            raise ConfigError(f"invalid confidence policy (p={self.p}, temperature={self.temperature}, "
                              f"depth={self.depth}).", fix="e.g. confidence:0.9,temperature=0.05,depth=100.")

    def seen_count(self, seen: CorpusCandidates, k: int) -> int:
        if self.p <= 0:
            return 0
        return min(softmax_mass_count(seen.scores[:self.depth], self.p, self.temperature), k)

    def allocate(self, cands, k, relevant=None):
        names = list(cands)
        if not names:
            return []
        k1 = min(self.seen_count(cands[names[0]], k), len(cands[names[0]]))
        others = {c: cands[c] for c in names[1:]}
        quotas = {names[0]: k1, **_top_by_key(others, _raw_keys(others), k - k1)}
        return fill_quotas(cands, quotas, k)   # the seen corpus gets budget back only if the others run out

    @property
    def spec(self) -> str:
        return f"confidence:{self.p:g},temperature={self.temperature:g},depth={self.depth}"


def zscores(cc: CorpusCandidates, source: str = "auto") -> np.ndarray:
    """Standardised scores of one corpus's candidates (background statistics when available)."""
    if source == "auto" and cc.background is not None:
        mu, sd = cc.background
    else:
        if len(cc) == 0:
            return cc.scores
        mu, sd = float(cc.scores.mean()), float(cc.scores.std())
    return (cc.scores - mu) / max(sd, _EPS)


@dataclass(repr=False)
class ZScorePolicy(AllocationPolicy):
    """Merge by per-query, per-corpus standardised scores (label-free calibration)."""

    source: str = "auto"
    name = "zscore"

    def __post_init__(self) -> None:
        if self.source not in ("auto", "candidates"):
            raise ConfigError(f"unknown zscore source {self.source!r}.", fix="use zscore or zscore:source=candidates.")

    def allocate(self, cands, k, relevant=None):
        keys = {c: zscores(cc, self.source) for c, cc in cands.items()}
        return _merge(cands, _top_by_key(cands, keys, k), keys)

    @property
    def spec(self) -> str:
        return "zscore" if self.source == "auto" else f"zscore:source={self.source}"


RRF_REMOVED = ("rrf was removed: each corpus contributes one ranked list, so 1/(K + rank) orders by rank "
               "whatever K is -- round-robin, the same split as fixed:0.5 with two corpora (ordered by rank).")


def _ecdf_keys(z: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Mid-rank empirical CDF of ``z`` in the sorted ``ref``; ties (e.g. beyond ``ref``'s range) broken by ``z``.

    The tie-break term is below ``1e-7``, smaller than half a CDF step for any reference of fewer than
    5 million values, so it only orders values whose percentile is equal.
    """
    n = max(ref.size, 1)
    u = (np.searchsorted(ref, z, "left") + np.searchsorted(ref, z, "right")) / (2.0 * n)
    return u + 1e-7 * (0.5 + 0.5 * np.tanh(z / 10.0))


@dataclass(repr=False)
class CalibratedPolicy(AllocationPolicy):
    """Score-level fusion on a label-free calibrated scale (beyond the paper; no labels, no tuning).

    Stage 1, per query: each candidate's score is standardised against the query's scores over a seeded
    random sample of its corpus, ``z = (s - mu_{c,q}) / sigma_{c,q}`` (as ``zscore``; candidates' own
    statistics when no background is known). This removes the query's offset and spread in that corpus.

    Stage 2, per corpus: ``z`` is compared with the *reference* distribution ``Z_c`` of the ``z`` values that
    the top-``r`` candidates (``r = ref``, default ``k``) of a set of reference queries get in the same
    corpus -- other queries' scores, no labels. ``method=ecdf`` (default) maps ``z`` to its percentile in
    ``Z_c`` (mid-rank empirical CDF); ``method=gauss`` standardises it, ``(z - mean Z_c) / std Z_c``. The
    merged list is the top-k by this calibrated value, i.e. a score-level fusion of the per-corpus lists.

    Why: a model fine-tuned on one corpus lifts that corpus's scores for every query, and a larger corpus
    gives higher top scores by chance (the maximum of more draws). Both shifts are properties of the
    corpus, visible in ``Z_c`` without labels; stage 2 removes them, while what stays is how unusually
    well *this* query matches *this* corpus compared with other queries.

    The reference set is given by :meth:`fit` (``allocate_all(..., reference=...)``): the sweep uses the
    tuning split's queries (their scores only), ``search`` the queries being searched. Without a fit a
    query is calibrated against its own top-``r`` (then ``ecdf`` interleaves corpora by rank).
    """

    method: str = "ecdf"
    ref: int | None = None
    name = "calibrated"
    needs_reference = True

    def __post_init__(self) -> None:
        if self.method not in ("ecdf", "gauss") or (self.ref is not None and self.ref < 1):
            raise ConfigError(f"invalid calibrated policy (method={self.method!r}, ref={self.ref}).",
                              fix="use calibrated, calibrated:method=gauss or calibrated:ref=20.")
        self.reference: dict[str, np.ndarray] = {}

    def fit(self, reference: "CandidateSet", k: int) -> "CalibratedPolicy":
        """Learn ``Z_c`` per corpus from the top-``r`` candidates of the reference queries (no labels)."""
        r = self.ref or k
        pooled: dict[str, list[np.ndarray]] = {}
        for by_c in reference.by_query.values():
            for c, cc in by_c.items():
                pooled.setdefault(c, []).append(zscores(cc)[:r])
        self.reference = {c: np.sort(np.concatenate(v)) for c, v in pooled.items()}
        return self

    def keys(self, corpus: str, cc: CorpusCandidates, k: int) -> np.ndarray:
        z = zscores(cc)
        ref = self.reference.get(corpus)
        if ref is None or ref.size == 0:
            ref = np.sort(z[:self.ref or k])
        if ref.size == 0:
            return z
        if self.method == "gauss":
            return (z - ref.mean()) / max(float(ref.std()), _EPS)
        return _ecdf_keys(z, ref)

    def allocate(self, cands, k, relevant=None):
        keys = {c: self.keys(c, cc, k) for c, cc in cands.items()}
        return _merge(cands, _top_by_key(cands, keys, k), keys)

    @property
    def spec(self) -> str:
        opts = ([f"method={self.method}"] if self.method != "ecdf" else []) + \
            ([f"ref={self.ref}"] if self.ref is not None else [])
        return "calibrated" + (":" + ",".join(opts) if opts else "")


def credit_curve(cc: CorpusCandidates, rel: Mapping[str, int], mode: str = "any") -> np.ndarray:
    """``curve[m]`` = credit of one corpus when its first ``m`` candidates are kept (see multi_metrics).

    ``any``: 1 once any relevant passage is kept; ``fraction``: share of its relevant passages kept.
    """
    relevant = {d for d, g in rel.items() if g > 0}
    hits = np.array([d in relevant for d in cc.ids], dtype=np.float64)
    found = np.concatenate([[0.0], np.cumsum(hits)])
    if not relevant:
        return np.zeros_like(found)
    return np.minimum(found, 1.0) if mode == "any" else found / len(relevant)


@dataclass(repr=False)
class OraclePolicy(AllocationPolicy):
    """Per query, the split of ``k`` that maximises per-corpus credit recall (needs relevance labels)."""

    mode: str = "any"
    name = "oracle"
    needs_relevance = True

    def split(self, cands: QueryCandidates, k: int, relevant: Relevant) -> dict[str, int]:
        names = list(cands)
        judged = [c for c in names if any(g > 0 for g in relevant.get(c, {}).values())]
        if len(names) == 2:
            return self._split_two(cands, k, relevant, max(len(judged), 1))
        # value[(credit, score sum)] of the best split of budget b over the corpora seen so far.
        best: list[tuple[tuple[float, float], dict[str, int]] | None] = [None] * (k + 1)
        best[0] = ((0.0, 0.0), {})
        for c in names:
            cc = cands[c]
            prefix = np.concatenate([[0.0], np.cumsum(cc.scores)])
            curve = credit_curve(cc, relevant.get(c, {}), self.mode) / max(len(judged), 1)
            new: list[tuple[tuple[float, float], dict[str, int]] | None] = [None] * (k + 1)
            for b, entry in enumerate(best):
                if entry is None:
                    continue
                (cr, ss), take = entry
                for m in range(0, min(len(cc), k - b) + 1):
                    val = (round(cr + float(curve[m]), 9), ss + float(prefix[m]))
                    cur = new[b + m]
                    if cur is None or val > cur[0]:
                        new[b + m] = (val, {**take, c: m})
            best = new
        for b in range(k, -1, -1):  # the largest feasible budget (all of k unless the corpora are small)
            if best[b] is not None:
                return best[b][1]
        return {}

    def _split_two(self, cands: QueryCandidates, k: int, relevant: Relevant, n_judged: int) -> dict[str, int]:
        """The same choice as the dynamic programme for two corpora, vectorised over the first one's share:
        the best credit, then the largest score sum, then the smallest share of the first corpus."""
        (a, ca), (b, cb) = cands.items()
        total = min(k, len(ca) + len(cb))
        m = np.arange(max(0, total - len(cb)), min(len(ca), total) + 1)
        cur_a = credit_curve(ca, relevant.get(a, {}), self.mode) / n_judged
        cur_b = credit_curve(cb, relevant.get(b, {}), self.mode) / n_judged
        credit = np.round(cur_a[m] + cur_b[total - m], 9)
        ssum = np.concatenate([[0.0], np.cumsum(ca.scores)])[m] + np.concatenate([[0.0], np.cumsum(cb.scores)])[total - m]
        best = np.flatnonzero(credit == credit.max())
        i = int(best[np.argmax(ssum[best])])
        return {a: int(m[i]), b: int(total - m[i])}

    def allocate(self, cands, k, relevant=None):
        if relevant is None:
            raise ConfigError("the oracle policy needs relevance judgements (qrels).",
                              fix="use oracle only in evaluation (drmix multicorpus sweep), not for search.")
        return fill_quotas(cands, self.split(cands, k, relevant), k)

    @property
    def spec(self) -> str:
        return "oracle" if self.mode == "any" else f"oracle:mode={self.mode}"


# --------------------------------------------------------------------------------------------------
# Parsing policy strings
# --------------------------------------------------------------------------------------------------


def _split_args(text: str) -> tuple[list[str], dict[str, str]]:
    pos: list[str] = []
    kw: dict[str, str] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        if "=" in part:
            key, value = part.split("=", 1)
            kw[key.strip().lower()] = value.strip()
        else:
            pos.append(part)
    return pos, kw


def _num(value: str, what: str, spec: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"allocation policy {spec!r}: {what} {value!r} is not a number.",
                          fix=POLICY_HELP) from None


POLICY_HELP = ("use naive, fixed:F (e.g. fixed:0.5, or fixed:0.5,0.3,0.2 for three corpora), "
               "confidence:P[,temperature=T,depth=N], zscore[:source=candidates], "
               "calibrated[:method=ecdf|gauss,ref=R], or oracle[:mode=any|fraction] (evaluation only).")


def _build(name: str, pos: list[str], kw: dict[str, str], spec: str) -> AllocationPolicy:
    def no_extra(allowed: Iterable[str] = ()) -> None:
        extra = set(kw) - set(allowed)
        if extra:
            raise ConfigError(f"allocation policy {spec!r}: unknown option(s) {sorted(extra)}.", fix=POLICY_HELP)

    if name == "naive":
        no_extra()
        if pos:
            raise ConfigError(f"allocation policy {spec!r} takes no arguments.", fix=POLICY_HELP)
        return NaivePolicy()
    if name == "fixed":
        no_extra()
        if not pos:
            raise ConfigError(f"allocation policy {spec!r} needs a fraction.", fix=POLICY_HELP)
        return FixedPolicy(tuple(_num(p, "fraction", spec) for p in pos))
    if name == "confidence":
        no_extra(("temperature", "t", "depth", "n", "p"))
        p = _num(pos[0] if pos else kw.get("p", "0.9"), "threshold", spec)
        t = _num(kw.get("temperature", kw.get("t", "0.05")), "temperature", spec)
        n = _num(kw.get("depth", kw.get("n", "100")), "depth", spec)
        return ConfidencePolicy(p=p, temperature=t, depth=int(n))
    if name == "zscore":
        no_extra(("source",))
        return ZScorePolicy(source=kw.get("source", pos[0] if pos else "auto"))
    if name == "calibrated":
        no_extra(("method", "ref"))
        ref = kw.get("ref")
        return CalibratedPolicy(method=kw.get("method", pos[0] if pos else "ecdf"),
                                ref=None if ref is None else int(_num(ref, "ref", spec)))
    if name == "rrf":
        raise ConfigError(RRF_REMOVED, fix="use fixed:0.5 (the same split), or calibrated for score-level fusion.")
    if name == "oracle":
        no_extra(("mode",))
        mode = kw.get("mode", pos[0] if pos else "any")
        if mode not in ("any", "fraction"):
            raise ConfigError(f"allocation policy {spec!r}: mode must be any or fraction.", fix=POLICY_HELP)
        return OraclePolicy(mode=mode)
    raise ConfigError(f"unknown allocation policy {spec!r}.", fix=POLICY_HELP)


POLICY_NAMES = ("naive", "fixed", "confidence", "zscore", "calibrated", "oracle")


def parse_policy(spec: str | AllocationPolicy) -> AllocationPolicy:
    """Build a policy from ``name[:args]``, e.g. ``naive``, ``fixed:0.5``, ``confidence:0.9,temperature=0.1``."""
    if isinstance(spec, AllocationPolicy):
        return spec
    text = spec.strip()
    name, _, rest = text.partition(":")
    pos, kw = _split_args(rest)
    return _build(name.strip().lower(), pos, kw, text)


def expand_policy_specs(specs: Iterable[str]) -> list[str]:
    """Expand ranges: ``fixed:0.0..1.0`` -> ``fixed:0``, ``fixed:0.1``, ... ``fixed:1`` (step 0.1, or ``/0.25``)."""
    out: list[str] = []
    for spec in specs:
        m = re.fullmatch(r"\s*(fixed|confidence):([0-9.]+)\.\.([0-9.]+)(?:/([0-9.]+))?\s*", spec)
        if not m:
            out.append(spec.strip())
            continue
        lo, hi, step = float(m.group(2)), float(m.group(3)), float(m.group(4) or 0.1)
        if step <= 0 or hi < lo:
            raise ConfigError(f"bad range {spec!r}.", fix="write fixed:0.0..1.0 or fixed:0..1/0.25.")
        n = int(math.floor((hi - lo) / step + 1e-9))
        out.extend(f"{m.group(1)}:{round(lo + i * step, 6):g}" for i in range(n + 1))
    return out


# --------------------------------------------------------------------------------------------------
# Applying a policy to many queries
# --------------------------------------------------------------------------------------------------


@dataclass
class CandidateSet:
    """Per-corpus candidates for a set of queries: ``by_query[qid][corpus] -> CorpusCandidates``."""

    corpora: list[str]
    by_query: dict[str, dict[str, CorpusCandidates]] = field(default_factory=dict)

    def reorder(self, first: str) -> "CandidateSet":
        """The same candidates with ``first`` as the first (seen) corpus."""
        if first not in self.corpora:
            raise ConfigError(f"unknown corpus {first!r}; corpora: {', '.join(self.corpora)}.",
                              fix="name one of the corpora given with --corpus.")
        order = [first] + [c for c in self.corpora if c != first]
        return CandidateSet(order, {q: {c: cs[c] for c in order} for q, cs in self.by_query.items()})

    def subset(self, qids: Iterable[str]) -> "CandidateSet":
        return CandidateSet(self.corpora, {q: self.by_query[q] for q in qids if q in self.by_query})


def allocate_all(cset: CandidateSet, policy: AllocationPolicy | str, k: int,
                 relevant: Mapping[str, Relevant] | None = None,
                 reference: CandidateSet | None = None) -> dict[str, list[Hit]]:
    """Apply a policy to every query of a candidate set; ``relevant[qid][corpus][doc]`` for the oracle.

    A policy that learns from unlabelled queries (``calibrated``) is fitted on ``reference`` (candidates of
    other queries, e.g. the tuning split's), or on ``cset`` itself when none is given; labels are never used.
    """
    policy = parse_policy(policy)
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}.", fix="pass --k 10 or another positive number.")
    if policy.needs_reference:
        policy.fit(reference if reference is not None else cset, k)
    out: dict[str, list[Hit]] = {}
    for qid, cands in cset.by_query.items():
        rel = None
        if policy.needs_relevance:
            if relevant is None:
                raise ConfigError("the oracle policy needs relevance judgements (qrels).",
                                  fix="use oracle only in evaluation (drmix multicorpus sweep).")
            rel = relevant.get(qid, {})
        out[qid] = policy.allocate(cands, k, rel)
    return out


# --------------------------------------------------------------------------------------------------
# The retriever
# --------------------------------------------------------------------------------------------------


def parse_corpus_args(values: Sequence[str]) -> dict[str, Path]:
    """Parse ``NAME=DIR`` options (order kept; the first is the seen corpus for fixed/confidence)."""
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ConfigError(f"--corpus {value!r} is not NAME=DIR.",
                              fix="write --corpus walmart=data/wa/walmart (one per corpus, the seen corpus first).")
        if "/" in name or name in out:
            raise ConfigError(f"--corpus name {name!r} is {'repeated' if name in out else 'not allowed (no /)'}.",
                              fix="give each corpus a distinct name without '/'.")
        p = Path(path).expanduser()
        if not p.exists():
            raise DataError("corpus directory not found.", path=p, fix="pass a BEIR directory or a saved index.")
        out[name] = p
    if not out:
        raise ConfigError("no corpus given.", fix="pass --corpus NAME=DIR at least once.")
    return out


def background_stats(query_emb: np.ndarray, sample_emb: np.ndarray) -> np.ndarray:
    """``[n_queries, 2]`` mean and std of each query's inner products with a corpus sample."""
    if sample_emb.size == 0:
        return np.zeros((len(query_emb), 2), dtype=np.float64)
    s = query_emb.astype(np.float32) @ sample_emb.astype(np.float32).T
    return np.stack([s.mean(axis=1), s.std(axis=1)], axis=1).astype(np.float64)


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """Seeded sorted sample of ``min(n, size)`` row numbers."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=min(n, size), replace=False)) if n else np.zeros(0, dtype=int)


@dataclass
class MultiCorpusRetriever:
    """One dense index per named corpus plus allocation policies over the merged top-k budget.

    ``indexes`` maps corpus name -> :class:`drmix.retrieval.index.DenseIndex` in corpus order (the first is
    the seen corpus); ``backgrounds`` optionally maps corpus name -> embeddings of a seeded random sample of
    that corpus, from which ``zscore`` takes its per-query statistics.
    """

    model: Any
    indexes: dict[str, Any]
    backgrounds: dict[str, np.ndarray] = field(default_factory=dict)
    depth: int = 100
    batch_size: int = 64
    prompt: str | None = None

    @classmethod
    def from_dirs(cls, model: Any, dirs: Mapping[str, str | Path], *, depth: int = 100, batch_size: int = 64,
                  background_size: int = 1000, seed: int = 42, show_progress: bool = False,
                  max_length: int | None = None) -> "MultiCorpusRetriever":
        """Open each corpus: a saved index directory is loaded, a BEIR directory is encoded and indexed."""
        indexes: dict[str, Any] = {}
        backgrounds: dict[str, np.ndarray] = {}
        for name, d in dirs.items():
            idx, sample = _open_corpus(model, Path(d), batch_size=batch_size, background_size=background_size,
                                       seed=seed, show_progress=show_progress, max_length=max_length)
            indexes[name] = idx
            if sample is not None:
                backgrounds[name] = sample
            log.info("corpus %s: %d passages", name, len(idx.ids))
        return cls(model, indexes, backgrounds, depth=depth, batch_size=batch_size)

    @property
    def corpora(self) -> list[str]:
        return list(self.indexes)

    def encode_queries(self, queries: Mapping[str, str], *, show_progress: bool = False) -> np.ndarray:
        from drmix.model.encoder import query_prompt
        from drmix.retrieval.index import encode_texts, model_normalizes

        prompt = self.prompt if self.prompt is not None else (query_prompt(self.model) or "")
        return encode_texts(self.model, list(queries.values()), batch_size=self.batch_size, prompt=prompt,
                            show_progress=show_progress, normalize=model_normalizes(self.model))

    def candidates(self, queries: Mapping[str, str], *, k: int = 10, show_progress: bool = False) -> CandidateSet:
        """Top ``max(depth, k)`` candidates of every corpus for every query (computed once, reused by policies)."""
        qids = list(queries)
        emb = self.encode_queries(queries, show_progress=show_progress)
        depth = max(self.depth, k)
        cset = CandidateSet(self.corpora, {q: {} for q in qids})
        for name, idx in self.indexes.items():
            n = len(idx.ids)
            if n == 0 or not qids:
                for q in qids:
                    cset.by_query[q][name] = CorpusCandidates([], np.zeros(0))
                continue
            scores, ids = idx.search(emb, min(depth, n))
            bg = background_stats(emb, self.backgrounds[name]) if name in self.backgrounds else None
            for i, q in enumerate(qids):  # approximate indexes may return fewer ids (trailing -inf scores)
                cset.by_query[q][name] = CorpusCandidates(
                    list(ids[i]), np.asarray(scores[i][:len(ids[i])], dtype=np.float64),
                    None if bg is None else (float(bg[i, 0]), float(bg[i, 1])))
        return cset

    def search(self, queries: Mapping[str, str], k: int = 10, policy: str | AllocationPolicy = "naive", *,
               reference_queries: Mapping[str, str] | None = None,
               show_progress: bool = False) -> dict[str, list[Hit]]:
        """Merged top-k per query under an allocation policy.

        ``reference_queries`` (texts only, no labels) calibrate ``calibrated``; by default the queries
        searched are their own reference.
        """
        policy = parse_policy(policy)
        if policy.needs_relevance:
            raise ConfigError("the oracle policy needs relevance judgements (qrels).",
                              fix="use oracle only in evaluation (drmix multicorpus sweep).")
        reference = None
        if policy.needs_reference and reference_queries:
            reference = self.candidates(reference_queries, k=k, show_progress=show_progress)
        return allocate_all(self.candidates(queries, k=k, show_progress=show_progress), policy, k,
                            reference=reference)


@dataclass
class EmptyIndex:
    """Stands in for the index of a corpus with no passages: it contributes no candidates."""

    path: Path
    ids: list[str] = field(default_factory=list)

    def doc(self, doc_id: str) -> None:
        return None


def _is_empty_corpus(d: Path) -> bool:
    """A directory with no entries, or whose ``corpus.jsonl`` holds no record (blank lines only)."""
    corpus = d / "corpus.jsonl"
    if corpus.is_file():
        with corpus.open("rb") as fh:
            return not any(line.strip() for line in fh)
    return d.is_dir() and not any(d.iterdir())


def _open_corpus(model: Any, d: Path, *, batch_size: int, background_size: int, seed: int,
                 show_progress: bool, max_length: int | None) -> tuple[Any, np.ndarray | None]:
    """A BEIR directory is encoded into a flat index; any other directory must be a saved index.

    An empty directory, or an empty ``corpus.jsonl``, is an empty corpus (a private corpus may have no
    passages yet): it gets an :class:`EmptyIndex` and contributes nothing to a multi-corpus search.
    """
    from drmix.retrieval.index import DenseIndex, index_corpus

    if _is_empty_corpus(d):
        log.warning("corpus %s has no passages; it contributes nothing", d)
        return EmptyIndex(d), None
    if (d / "corpus.jsonl").exists():
        from drmix.data.beir import read_corpus

        idx = index_corpus(model, read_corpus(d / "corpus.jsonl"), batch_size=batch_size, max_length=max_length,
                           show_progress=show_progress, metadata={"corpus": str(d)})
    else:
        idx = DenseIndex.load(d)
    sample = _reconstruct_sample(idx, background_size, seed) if background_size > 0 else None
    return idx, sample


def _reconstruct_sample(idx: Any, size: int, seed: int) -> np.ndarray | None:
    """Embeddings of a seeded sample of an index's rows (None when the index cannot reconstruct them)."""
    try:
        rows = sample_rows(idx.index.ntotal, size, seed)
        return np.stack([idx.index.reconstruct(int(r)) for r in rows]) if len(rows) else None
    except Exception:  # noqa: BLE001 - IVF/PQ indexes may not reconstruct; zscore then uses candidates
        log.info("index cannot reconstruct vectors; zscore falls back to candidate statistics")
        return None


# --------------------------------------------------------------------------------------------------
# The `drmix search --corpus ...` entry point
# --------------------------------------------------------------------------------------------------


def multi_search(model: Any, corpus_dirs: Mapping[str, str | Path], queries: Mapping[str, str], *, k: int = 10,
                 allocation: str | AllocationPolicy = "naive", depth: int = 100, batch_size: int = 64,
                 with_text: bool = True, show_progress: bool = False) -> list[dict[str, Any]]:
    """Search several corpora with one top-k budget (what ``drmix search --corpus NAME=DIR ...`` runs).

    ``corpus_dirs`` maps names to BEIR directories (encoded on the fly) or saved index directories, in
    corpus order (the first is the seen corpus). Returns one row per query, shaped like the single-corpus
    search: ``{"query_id", "query", "hits": [{"rank", "corpus", "doc_id", "score", "text"?}]}``.
    """
    from drmix.data.beir import doc_text

    policy = parse_policy(allocation)
    if policy.needs_relevance:  # refuse before encoding anything
        raise ConfigError("the oracle policy needs relevance judgements (qrels).",
                          fix="use oracle only in evaluation (drmix multicorpus sweep).")
    retriever = MultiCorpusRetriever.from_dirs(model, corpus_dirs, depth=depth, batch_size=batch_size,
                                               show_progress=show_progress)
    results = retriever.search(queries, k, policy, show_progress=show_progress)
    rows = []
    for qid, hits in results.items():
        out_hits = []
        for rank, h in enumerate(hits, start=1):
            hit: dict[str, Any] = {"rank": rank, "corpus": h.corpus, "doc_id": h.doc_id, "score": round(h.score, 6)}
            doc = retriever.indexes[h.corpus].doc(h.doc_id) if with_text else None
            if doc is not None:
                hit["text"] = doc_text(doc)
            out_hits.append(hit)
        rows.append({"query_id": qid, "query": queries[qid], "hits": out_hits})
    return rows
