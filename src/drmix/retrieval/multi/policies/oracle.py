"""``oracle`` -- analysis only, needs relevance judgements: the best split of the budget per query.

Per query, the split ``(k_1..k_n)`` that maximises per-corpus credit recall
(:mod:`drmix.evaluation.multi`), found exactly by dynamic programming over corpora (for two
corpora a vectorised scan of the first corpus's share that makes the same choice); among optimal
splits it prefers the one with the largest sum of raw scores (what naive merging would keep).
``oracle:mode=fraction`` optimises the fraction credit (the sweep picks the mode matching ``--credit``).
Every other policy keeps a prefix of each corpus's list, so the oracle's recall is never below theirs
in the same credit mode. The upper bound of the paper's Table 3 ("oracle" row).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import fill_quotas
from drmix.retrieval.multi.registry import policy_help, register_policy
from drmix.retrieval.multi.types import CorpusCandidates, QueryCandidates, Relevant


def credit_curve(cc: CorpusCandidates, rel: Mapping[str, int], mode: str = "any") -> np.ndarray:
    """``curve[m]`` = credit of one corpus when its first ``m`` candidates are kept (drmix.evaluation.multi.metrics).

    ``any``: 1 once any relevant passage is kept; ``fraction``: share of its relevant passages kept.
    """
    relevant = {d for d, g in rel.items() if g > 0}
    hits = np.array([d in relevant for d in cc.ids], dtype=np.float64)
    found = np.concatenate([[0.0], np.cumsum(hits)])
    if not relevant:
        return np.zeros_like(found)
    return np.minimum(found, 1.0) if mode == "any" else found / len(relevant)


@register_policy("oracle", usage="oracle", help="oracle[:mode=any|fraction] (evaluation only)", order=90,
                 positional=("mode",), needs_labels=True, sweep=("oracle",), sweep_order=5)
@dataclass(repr=False)
class OraclePolicy(AllocationPolicy):
    """Per query, the split of ``k`` that maximises per-corpus credit recall (needs relevance labels)."""

    mode: str = "any"

    def __post_init__(self) -> None:
        if self.mode not in ("any", "fraction"):
            raise ConfigError(f"allocation policy 'oracle:{self.mode}': mode must be any or fraction.",
                              fix=policy_help())

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
