"""``crcs`` -- CRCS(e) resource selection turned into a budget split (label-free; federated search).

Shokouhi, "Central-Rank-Based Collection Selection in Uncooperative Distributed Information Retrieval",
ECIR 2007: like ReDDE, but a sampled passage counts by its rank in the centralised sample ranking,
``R(j) = exp(-beta j)``, so passages near the top weigh more (:mod:`drmix.retrieval.multi.selection`).
Corpus ``c`` gets ``k_c = k Rel(c) / sum_c' Rel(c')``. Defaults fixed before any evaluation, not tuned:
``beta = 0.5`` and the complete-rank cutoff 100 (the defaults of Markov's lidr implementation). The merged
list is ordered by raw similarity (``merge=rank``: interleaved by rank).
"""
from __future__ import annotations

from dataclasses import dataclass

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, fill_quotas
from drmix.retrieval.multi.policies.redde import quotas_from_estimates
from drmix.retrieval.multi.registry import register_policy
from drmix.retrieval.multi.selection import crcs_weight, csi_estimates


@register_policy("crcs", usage="crcs", help="crcs[:beta=B,cutoff=L,merge=score|rank]", order=34, label_free=True,
                 sweep=("crcs", "crcs:merge=rank"))
@dataclass(repr=False)
class CrcsPolicy(AllocationPolicy):
    """Quotas proportional to CRCS(e)'s rank-weighted estimate of each corpus's share of the top passages."""

    beta: float = 0.5
    cutoff: int = 100
    merge: str = "score"

    def __post_init__(self) -> None:
        if self.beta <= 0 or self.cutoff < 1:
            raise ConfigError(f"invalid crcs policy (beta={self.beta}, cutoff={self.cutoff}).",
                              fix="e.g. crcs:beta=0.5,cutoff=100.")
        check_merge(self.merge, "crcs")

    def allocate(self, cands, k, relevant=None):
        est = csi_estimates(cands, self.cutoff, crcs_weight(self.beta))
        return fill_quotas(cands, quotas_from_estimates(list(cands), est, k), k, self.merge)

    @property
    def spec(self) -> str:
        opts = ([f"beta={self.beta:g}"] if self.beta != 0.5 else []) + \
            ([f"cutoff={self.cutoff}"] if self.cutoff != 100 else []) + \
            ([f"merge={self.merge}"] if self.merge != "score" else [])
        return "crcs" + (":" + ",".join(opts) if opts else "")
