"""``confidence:P`` -- confidence (nucleus) allocation (the paper's section 4.2 and footnote 2).

*Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``):
``p_i = softmax(s_i / T)`` over the first (seen) corpus's top-``N`` scores; take the smallest ``m``
seen-corpus passages with ``sum_{i<=m} p_i >= P`` (capped at ``k``), the rest of the budget from the
other corpora (by raw score when there are several). The paper computes the softmax over ``N >> k``
retrieved scores and does not state the temperature: drmix uses ``N = 100`` and ``T = 0.05`` (the
InfoNCE temperature the encoder is trained with); both are parameters:
``confidence:0.9,temperature=0.1,depth=50``. The seen corpus gets budget back only if the others run out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import fill_quotas, raw_keys, top_by_key
from drmix.retrieval.multi.registry import register_policy
from drmix.retrieval.multi.types import CorpusCandidates


def softmax_mass_count(scores: np.ndarray, p: float, temperature: float) -> int:
    """Smallest ``m`` with ``sum_{i<m} softmax(scores / T)_i >= p`` (scores sorted descending)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return 0
    z = s / temperature
    z = np.exp(z - z.max())
    cum = np.cumsum(z / z.sum())
    return int(min(np.searchsorted(cum, p - 1e-12) + 1, s.size))


@register_policy("confidence", usage="confidence:P", help="confidence:P[,temperature=T,depth=N]",
                 order=20, positional=("p",), aliases=(("t", "temperature"), ("n", "depth")),
                 tunable=True, sweep_range=True, sweep=("confidence:0.1..0.9/0.2",))
@dataclass(repr=False)
class ConfidencePolicy(AllocationPolicy):
    """Confidence (nucleus) allocation from the first corpus: stop when its softmax mass reaches ``p``."""

    p: float = 0.9
    temperature: float = 0.05
    depth: int = 100

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
        quotas = {names[0]: k1, **top_by_key(others, raw_keys(others), k - k1)}
        return fill_quotas(cands, quotas, k)   # the seen corpus gets budget back only if the others run out

    @property
    def spec(self) -> str:
        return f"confidence:{self.p:g},temperature={self.temperature:g},depth={self.depth}"
