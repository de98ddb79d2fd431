"""``calibrated`` -- score-level fusion on a label-free calibrated scale (beyond the paper).

Stage 1, per query: ``z`` as for ``zscore`` (the query against the corpus background). Stage 2, per
corpus: ``z`` is compared with the *reference* distribution ``Z_c`` of the ``z`` values that the top-``r``
candidates of other (reference) queries get from that corpus -- their scores, never labels.
``method=ecdf`` (default) maps ``z`` to its percentile in ``Z_c``; ``method=gauss`` standardises it. The
lists are merged by that value.

``rrf`` is registered here as removed: with one ranked list per corpus reciprocal rank fusion is
round-robin whatever its ``K``, i.e. ``fixed:0.5`` with two corpora ordered by rank; ``calibrated`` is
the score-level fusion that replaces it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, merge_taken, top_by_key
from drmix.retrieval.multi.policies.zscore import zscores
from drmix.retrieval.multi.registry import register_policy, register_removed
from drmix.retrieval.multi.types import CandidateSet, CorpusCandidates

_EPS = 1e-9

RRF_REMOVED = ("rrf was removed: each corpus contributes one ranked list, so 1/(K + rank) orders by rank "
               "whatever K is -- round-robin, the same split as fixed:0.5 with two corpora (ordered by rank).")
register_removed("rrf", RRF_REMOVED, fix="use fixed:0.5 (the same split), or calibrated for score-level fusion.")


def _ecdf_keys(z: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Mid-rank empirical CDF of ``z`` in the sorted ``ref``; ties (e.g. beyond ``ref``'s range) broken by ``z``.

    The tie-break term is below ``1e-7``, smaller than half a CDF step for any reference of fewer than
    5 million values, so it only orders values whose percentile is equal.
    """
    n = max(ref.size, 1)
    u = (np.searchsorted(ref, z, "left") + np.searchsorted(ref, z, "right")) / (2.0 * n)
    return u + 1e-7 * (0.5 + 0.5 * np.tanh(z / 10.0))


@register_policy("calibrated", usage="calibrated", help="calibrated[:method=ecdf|gauss,ref=R,merge=key|score|rank]", order=40,
                 positional=("method",), label_free=True, sweep=("calibrated", "calibrated:method=gauss"))
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

    ``merge=score`` (or ``rank``) keeps the passages chosen by the calibrated value but orders them by raw
    similarity (or interleaves them by rank): the allocation and the order of the merged list are separate.
    """

    method: str = "ecdf"
    ref: int | None = None
    merge: str = "key"
    needs_reference = True

    def __post_init__(self) -> None:
        if self.method not in ("ecdf", "gauss") or (self.ref is not None and self.ref < 1):
            raise ConfigError(f"invalid calibrated policy (method={self.method!r}, ref={self.ref}).",
                              fix="use calibrated, calibrated:method=gauss or calibrated:ref=20.")
        check_merge(self.merge, "calibrated", ("key", "score", "rank"))
        self.reference: dict[str, np.ndarray] = {}

    def fit(self, reference: CandidateSet, k: int) -> "CalibratedPolicy":
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
        return merge_taken(cands, top_by_key(cands, keys, k), self.merge, keys)

    @property
    def spec(self) -> str:
        opts = ([f"method={self.method}"] if self.method != "ecdf" else []) + \
            ([f"ref={self.ref}"] if self.ref is not None else []) + \
            ([f"merge={self.merge}"] if self.merge != "key" else [])
        return "calibrated" + (":" + ",".join(opts) if opts else "")
