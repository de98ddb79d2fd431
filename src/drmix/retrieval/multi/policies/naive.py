"""``naive`` -- the paper's naive merging: one list ordered by raw similarity.

*Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``), section 4.2:
all corpora's candidates are merged and the top-k by inner product kept.
"""
from __future__ import annotations

from dataclasses import dataclass

from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import merge_top_k, raw_keys
from drmix.retrieval.multi.registry import register_policy


@register_policy("naive", usage="naive", help="naive", order=0, sweep=("naive",))
@dataclass(repr=False)
class NaivePolicy(AllocationPolicy):
    """Merge all corpora by raw score (the paper's naive merging)."""

    def allocate(self, cands, k, relevant=None):
        return merge_top_k(cands, raw_keys(cands), k)
