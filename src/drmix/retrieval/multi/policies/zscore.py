"""``zscore`` -- merge by per-query, per-corpus standardised scores (beyond the paper; label-free).

Each corpus's scores for the query are standardised, ``z = (s - mu_{c,q}) / sigma_{c,q}``, and the lists
are merged by ``z``. The statistics come from the query's scores against a seeded random sample of the
corpus (its *background*) when the retriever supplies one, else from the query's top-``depth``
candidates of that corpus (``zscore:source=candidates`` forces the latter). This is the z-score
normalisation of score-level fusion (Montague & Aslam, "Relevance score normalization for metasearch",
CIKM 2001). Needs no labels and no tuning.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, merge_taken, top_by_key
from drmix.retrieval.multi.registry import register_policy
from drmix.retrieval.multi.types import CorpusCandidates

_EPS = 1e-9


def zscores(cc: CorpusCandidates, source: str = "auto") -> np.ndarray:
    """Standardised scores of one corpus's candidates (background statistics when available)."""
    if source == "auto" and cc.background is not None:
        mu, sd = cc.background
    else:
        if len(cc) == 0:
            return cc.scores
        mu, sd = float(cc.scores.mean()), float(cc.scores.std())
    return (cc.scores - mu) / max(sd, _EPS)


@register_policy("zscore", usage="zscore", help="zscore[:source=candidates,merge=key|score|rank]", order=30, positional=("source",),
                 label_free=True, sweep=("zscore",))
@dataclass(repr=False)
class ZScorePolicy(AllocationPolicy):
    """Merge by per-query, per-corpus standardised scores (label-free calibration)."""

    source: str = "auto"
    merge: str = "key"

    def __post_init__(self) -> None:
        if self.source not in ("auto", "candidates"):
            raise ConfigError(f"unknown zscore source {self.source!r}.", fix="use zscore or zscore:source=candidates.")
        check_merge(self.merge, "zscore", ("key", "score", "rank"))

    def allocate(self, cands, k, relevant=None):
        keys = {c: zscores(cc, self.source) for c, cc in cands.items()}
        return merge_taken(cands, top_by_key(cands, keys, k), self.merge, keys)

    @property
    def spec(self) -> str:
        opts = ([f"source={self.source}"] if self.source != "auto" else []) + \
            ([f"merge={self.merge}"] if self.merge != "key" else [])
        return "zscore" + (":" + ",".join(opts) if opts else "")
