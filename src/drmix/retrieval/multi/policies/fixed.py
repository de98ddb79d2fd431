"""``fixed:F`` / ``fixed:F1,F2,...`` -- fixed-fractional allocation (the paper's section 4.2).

*Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``): ``k_1 = round(F k)``
from the first (seen) corpus, the rest from the second. With more corpora, one fraction gives the first
corpus's share and splits the rest evenly; one fraction per corpus (normalised to sum 1) is also accepted.
Quotas are rounded by the largest-remainder method so that they sum to exactly ``k``; ``round`` is
half-up (``fixed:0.25`` at ``k = 10`` takes 3 from the first corpus); remainders that tie go to the
earlier corpus. Budget a corpus cannot use goes to the best remaining candidates by raw score. The
merged list is ordered by raw similarity (``merge=rank``: interleaved by relative rank).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, fill_quotas, largest_remainder
from drmix.retrieval.multi.registry import register_policy


@register_policy("fixed", usage="fixed:F",
                 help="fixed:F[,merge=score|rank] (e.g. fixed:0.5, or fixed:0.5,0.3,0.2 for three corpora)",
                 order=10, positional=("fractions",), variadic=True, required=("fractions",),
                 tunable=True, sweep_range=True, sweep_simplex=True, sweep=("fixed:0.0..1.0",))
@dataclass(repr=False)
class FixedPolicy(AllocationPolicy):
    """Fixed-fractional allocation: a fixed share of ``k`` per corpus (one fraction = first corpus's share)."""

    fractions: tuple[float, ...] = (0.5,)
    merge: str = "score"

    def __post_init__(self) -> None:
        check_merge(self.merge, "fixed")
        self.fractions = tuple(float(f) for f in self.fractions)
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
        return fill_quotas(cands, self.quotas(list(cands), k), k, self.merge)

    @property
    def spec(self) -> str:
        return "fixed:" + ",".join(f"{f:g}" for f in self.fractions) + \
            (f",merge={self.merge}" if self.merge != "score" else "")
