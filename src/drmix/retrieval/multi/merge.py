"""Helpers shared by the allocation policies: quotas, merging by a key, largest-remainder rounding.

Every policy keeps a *prefix* of each corpus's candidate list and merges the kept prefixes by a key
(raw score, ``z``, a calibrated value); ties are broken by corpus order, then by rank within the corpus.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from drmix.errors import ConfigError
from drmix.retrieval.multi.types import Hit, QueryCandidates


def merge_by_key(cands: QueryCandidates, take: Mapping[str, int], keys: Mapping[str, np.ndarray]) -> list[Hit]:
    """Merge the first ``take[c]`` candidates of each corpus ordered by ``keys`` (desc), ties by corpus, rank."""
    rows: list[tuple[float, int, int, Hit]] = []
    for ci, (name, cc) in enumerate(cands.items()):
        for r in range(min(take.get(name, 0), len(cc))):
            rows.append((-float(keys[name][r]), ci, r, Hit(name, cc.ids[r], float(cc.scores[r]))))
    rows.sort(key=lambda t: t[:3])
    return [t[3] for t in rows]


def top_by_key(cands: QueryCandidates, keys: Mapping[str, np.ndarray], k: int,
               start: Mapping[str, int] | None = None) -> dict[str, int]:
    """How many of each corpus the best ``k`` candidates by ``keys`` (after ``start[c]``) contain."""
    start = start or {}
    rows = []
    for ci, (name, cc) in enumerate(cands.items()):
        s0 = start.get(name, 0)
        for r in range(s0, min(len(cc), s0 + max(k, 0))):   # no corpus can give more than k
            rows.append((-float(keys[name][r]), ci, r, name))
    rows.sort(key=lambda t: t[:3])
    counts = {name: start.get(name, 0) for name in cands}
    for t in rows[:max(k, 0)]:
        counts[t[3]] += 1
    return counts


def raw_keys(cands: QueryCandidates) -> dict[str, np.ndarray]:
    """The raw similarity scores as merge keys."""
    return {c: cc.scores for c, cc in cands.items()}


def merge_top_k(cands: QueryCandidates, keys: Mapping[str, np.ndarray], k: int) -> list[Hit]:
    """The best ``k`` candidates of all corpora by ``keys``, ordered by ``keys`` (score-level fusion)."""
    return merge_by_key(cands, top_by_key(cands, keys, k), keys)


MERGES = ("score", "rank")


def rank_keys(cands: QueryCandidates, take: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Merge keys that interleave the kept prefixes by relative rank: the ``r``-th of ``t_c`` kept passages
    of corpus ``c`` gets ``-(r + 0.5) / t_c`` (equal quotas: round-robin; ties by corpus order)."""
    return {c: -(np.arange(len(cc), dtype=np.float64) + 0.5) / max(int(take.get(c, 0)), 1) for c, cc in cands.items()}


def merge_taken(cands: QueryCandidates, take: Mapping[str, int], merge: str,
                keys: Mapping[str, np.ndarray] | None = None) -> list[Hit]:
    """Order the kept prefixes: ``score`` (raw similarity), ``rank`` (:func:`rank_keys`) or ``key`` (``keys``).

    Every merge keeps each corpus's own order (the kept part of a corpus is a prefix, ordered by rank).
    """
    if merge == "score":
        keys = raw_keys(cands)
    elif merge == "rank":
        keys = rank_keys(cands, take)
    elif merge != "key" or keys is None:
        raise ValueError(f"unknown merge {merge!r}")
    return merge_by_key(cands, take, keys)


def check_merge(merge: str, policy: str, allowed: Sequence[str] = MERGES) -> None:
    """Refuse an unknown ``merge=`` option with the allowed values."""
    if merge not in allowed:
        raise ConfigError(f"{policy}: unknown merge {merge!r}.", fix=f"use merge={' or merge='.join(allowed)}.")


def fill_quotas(cands: QueryCandidates, quotas: Mapping[str, int], k: int, merge: str = "score") -> list[Hit]:
    """Take ``quotas[c]`` from each corpus (capped at its size); leftover budget goes by raw score; merge
    by raw score (``merge="rank"``: interleave by relative rank)."""
    take = {c: min(max(int(quotas.get(c, 0)), 0), len(cc)) for c, cc in cands.items()}
    used = sum(take.values())
    if used > k:
        raise ValueError(f"quotas {dict(quotas)} exceed k={k}")
    if used < k:
        take = top_by_key(cands, raw_keys(cands), k - used, start=take)
    return merge_taken(cands, take, merge)


def largest_remainder(k: int, fractions: Sequence[float]) -> list[int]:
    """Integer quotas summing to ``k`` proportional to ``fractions`` (Hamilton's method).

    Remainders are compared after rounding to 9 decimals (so ``0.3 * 10`` is exactly 3) and ties go to
    the earlier position, which makes two corpora follow ``k_1 = round_half_up(f k)``.
    """
    f = np.asarray(fractions, dtype=np.float64)
    if f.size == 0:
        return []
    if np.any(f < 0) or f.sum() <= 0:
        raise ConfigError(f"fractions must be non-negative and not all zero, got {list(fractions)}.",
                          fix="e.g. fixed:0.5 or fixed:0.5,0.3,0.2.")
    exact = np.round(f / f.sum() * k, 9)
    base = np.floor(exact).astype(int)
    rest = k - int(base.sum())
    order = sorted(range(len(f)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:rest]:
        base[i] += 1
    return [int(b) for b in base]
