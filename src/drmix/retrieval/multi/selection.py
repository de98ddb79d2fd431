"""Resource selection on a centralised sample index (CSI), the label-free evidence of ``redde`` and ``crcs``.

Federated search estimates, without labels, how much of what a query wants each collection holds from a
*centralised sample index*: a sample of every collection, ranked together by one scorer. Here the sample
of a corpus is the seeded random sample of its vectors the retriever already reads for ``zscore`` (its
background, 1,000 passages by default), the scorer is the dense model, and the query's top sample scores
travel with its candidates (:attr:`CorpusCandidates.sample_scores`).

The walk (Si & Callan, "Relevant Document Distribution Estimation Method for Resource Selection", SIGIR
2003, section 3; the transcription follows Markov's lidr ``ReDDE``/``AbstractResourceSelection``):
rank every sampled passage of every corpus by score; a sampled passage of corpus ``c`` stands for
``|C_c| / |S_c|`` passages of the complete ranking; walk the sample ranking until the estimated complete
rank reaches ``cutoff``; the estimate of corpus ``c`` is

    Rel(c) = |C_c| / |S_c| * sum over c's sampled passages at sample ranks j before the cutoff of R(j)

with ``R(j) = 1`` for ReDDE and ``R(j) = exp(-beta j)`` for CRCS(e) (Shokouhi, "Central-Rank-Based
Collection Selection in Uncooperative Distributed Information Retrieval", ECIR 2007; CRCS's constant
factors cancel once the estimates are normalised). Hand-written: no maintained Python library implements
ReDDE or CRCS.

When a corpus has no sample (an index that cannot reconstruct vectors) its candidates stand in for the
sample, with ``|C_c| / |S_c| = 1``.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from drmix.retrieval.multi.types import QueryCandidates


def csi_estimates(cands: QueryCandidates, cutoff: float, weight: Callable[[int], float]) -> dict[str, float]:
    """``Rel(c)`` of every corpus for one query (see the module docstring); ties by corpus order, then rank."""
    rows: list[tuple[float, int, int, str, float]] = []
    for ci, (name, cc) in enumerate(cands.items()):
        if cc.sample_scores is not None and cc.size and cc.sample_size:
            scores, ratio = cc.sample_scores, cc.size / cc.sample_size
        else:
            scores, ratio = cc.scores, 1.0
        rows.extend((-float(s), ci, j, name, ratio) for j, s in enumerate(scores))
    rows.sort(key=lambda t: t[:3])
    est = {name: 0.0 for name in cands}
    complete = 0.0
    for rank, (_, _, _, name, ratio) in enumerate(rows):
        est[name] += weight(rank) * ratio
        complete += ratio
        if complete >= cutoff:
            break
    return est


def redde_weight(rank: int) -> float:
    """ReDDE: every sampled passage above the cutoff counts once."""
    return 1.0


def crcs_weight(beta: float) -> Callable[[int], float]:
    """CRCS(e): a sampled passage at sample rank ``j`` counts ``exp(-beta j)``."""
    return lambda rank: math.exp(-beta * rank)
