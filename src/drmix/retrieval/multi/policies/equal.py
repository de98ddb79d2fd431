"""``equal`` -- the equal split: ``k / n`` from each of ``n`` corpora (largest remainder, ties to the earlier).

The robust default of ``drmix search``: it needs no labels and no tuning, equals ``fixed:0.5`` with two
corpora (the paper's fixed-fractional allocation at F = 0.5, *Multi Distribution Dense Information
Retrieval*, seed ``003_1da1604bae7d74b5.txt``, section 4.2) and extends to any number of corpora. On the
shared benchmarks it beat naive merging where the corpora differ in size (Walmart-Amazon) and lost a little
where they do not (Amazon-Google); the figures are in docs/multicorpus.md.
Budget a corpus cannot use goes to the others by raw score; the merged list is ordered by raw similarity
(``merge=rank``: interleaved by rank).
"""
from __future__ import annotations

from dataclasses import dataclass

from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import check_merge, fill_quotas, largest_remainder
from drmix.retrieval.multi.registry import register_policy


@register_policy("equal", usage="equal", help="equal[:merge=score|rank]", order=5, label_free=True,
                 sweep=("equal", "equal:merge=rank"), sweep_order=1)
@dataclass(repr=False)
class EqualPolicy(AllocationPolicy):
    """The same share of ``k`` from every corpus."""

    merge: str = "score"

    def __post_init__(self) -> None:
        check_merge(self.merge, "equal")

    def allocate(self, cands, k, relevant=None):
        names = list(cands)
        quotas = dict(zip(names, largest_remainder(k, [1.0] * len(names)))) if names else {}
        return fill_quotas(cands, quotas, k, self.merge)

    @property
    def spec(self) -> str:
        return "equal" if self.merge == "score" else f"equal:merge={self.merge}"
