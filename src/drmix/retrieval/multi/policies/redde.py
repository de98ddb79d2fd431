"""``redde`` -- ReDDE resource selection turned into a budget split (label-free; federated search).

Si & Callan, "Relevant Document Distribution Estimation Method for Resource Selection", SIGIR 2003:
estimate from the centralised sample index how many of the query's top-ranked passages each corpus holds,
``Rel(c)`` (:mod:`drmix.retrieval.multi.selection`), and give corpus ``c`` the share
``k_c = k Rel(c) / sum_c' Rel(c')`` of the budget (largest-remainder rounding; an equal split when every
estimate is 0). ``cutoff`` is the complete-rank cutoff of the walk: 100, the default of Markov's lidr
implementation (Si & Callan use 0.2-0.5% of the estimated total size, 49-123 passages for
Walmart-Amazon's 24,628). Fixed before any evaluation; not tuned. The merged list is ordered by raw
similarity (``merge=rank``: interleaved by rank).
"""
from __future__ import annotations

from dataclasses import dataclass

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, fill_quotas, largest_remainder
from drmix.retrieval.multi.registry import register_policy
from drmix.retrieval.multi.selection import csi_estimates, redde_weight


def quotas_from_estimates(names: list[str], est: dict[str, float], k: int) -> dict[str, int]:
    """Budget shares proportional to the estimates (an equal split when they are all 0)."""
    weights = [max(est.get(c, 0.0), 0.0) for c in names]
    if sum(weights) <= 0:
        weights = [1.0] * len(names)
    return dict(zip(names, largest_remainder(k, weights))) if names else {}


@register_policy("redde", usage="redde", help="redde[:cutoff=L,merge=score|rank]", order=32, label_free=True,
                 sweep=("redde", "redde:merge=rank"))
@dataclass(repr=False)
class ReddePolicy(AllocationPolicy):
    """Quotas proportional to ReDDE's estimate of each corpus's share of the query's top passages."""

    cutoff: int = 100
    merge: str = "score"

    def __post_init__(self) -> None:
        if self.cutoff < 1:
            raise ConfigError(f"redde cutoff must be at least 1, got {self.cutoff}.", fix="e.g. redde:cutoff=100.")
        check_merge(self.merge, "redde")

    def allocate(self, cands, k, relevant=None):
        est = csi_estimates(cands, self.cutoff, redde_weight)
        return fill_quotas(cands, quotas_from_estimates(list(cands), est, k), k, self.merge)

    @property
    def spec(self) -> str:
        opts = ([f"cutoff={self.cutoff}"] if self.cutoff != 100 else []) + \
            ([f"merge={self.merge}"] if self.merge != "score" else [])
        return "redde" + (":" + ",".join(opts) if opts else "")
