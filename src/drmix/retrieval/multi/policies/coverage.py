"""``coverage`` -- the split that maximises the model's own estimate of per-corpus credit (label-free).

Per-corpus credit recall counts, for each corpus, whether its first relevant passage is in the top-k. Read
the encoder's scores of one corpus's candidates as its posterior over which of them is the corpus's
positive, ``p_c(r) = softmax(s_c / T)_r`` over the top-``depth`` candidates -- what InfoNCE training
makes them (Oord et al., "Representation Learning with Contrastive Predictive Coding", arXiv:1807.03748);
then the expected credit of keeping ``m_c`` passages of every corpus is ``sum_c sum_{r<m_c} p_c(r)``.
Since ``p_c`` decreases with the rank, taking the ``k`` largest ``p_c(r)`` over all corpora maximises it
(a greedy choice on concave gains), and keeps a prefix of every corpus. This is score normalisation within
each collection before the merge, as in CORI merging (Callan, Lu & Croft, "Searching Distributed
Collections with Inference Networks", SIGIR 1995), with the softmax as the normaliser.

``T = 0.05`` (the InfoNCE temperature all-MiniLM-L6-v2 and ``drmix train`` use, as ``confidence``) and
``depth = 100`` are fixed before any evaluation. The merged list is ordered by ``p`` (``merge=score``:
raw similarity, ``merge=rank``: interleaved by rank).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, merge_taken, top_by_key
from drmix.retrieval.multi.registry import register_policy
from drmix.retrieval.multi.types import CorpusCandidates


def softmax_posterior(cc: CorpusCandidates, temperature: float, depth: int) -> np.ndarray:
    """``softmax(s / T)`` over the first ``depth`` candidates; candidates beyond ``depth`` get 0."""
    out = np.zeros(len(cc), dtype=np.float64)
    n = min(len(cc), depth)
    if n:
        z = cc.scores[:n] / temperature
        e = np.exp(z - z.max())
        out[:n] = e / e.sum()
    return out


@register_policy("coverage", usage="coverage", help="coverage[:temperature=T,depth=N,merge=key|score|rank]",
                 order=36, aliases=(("t", "temperature"), ("n", "depth")), label_free=True,
                 sweep=("coverage", "coverage:merge=rank"))
@dataclass(repr=False)
class CoveragePolicy(AllocationPolicy):
    """The top-k by each corpus's softmax posterior over its own candidates (expected per-corpus credit)."""

    temperature: float = 0.05
    depth: int = 100
    merge: str = "key"

    def __post_init__(self) -> None:
        if self.temperature <= 0 or self.depth < 1:
            raise ConfigError(f"invalid coverage policy (temperature={self.temperature}, depth={self.depth}).",
                              fix="e.g. coverage:temperature=0.05,depth=100.")
        check_merge(self.merge, "coverage", ("key", "score", "rank"))

    def allocate(self, cands, k, relevant=None):
        keys = {c: softmax_posterior(cc, self.temperature, self.depth) for c, cc in cands.items()}
        return merge_taken(cands, top_by_key(cands, keys, k), self.merge, keys)

    @property
    def spec(self) -> str:
        opts = ([f"temperature={self.temperature:g}"] if self.temperature != 0.05 else []) + \
            ([f"depth={self.depth}"] if self.depth != 100 else []) + \
            ([f"merge={self.merge}"] if self.merge != "key" else [])
        return "coverage" + (":" + ",".join(opts) if opts else "")
