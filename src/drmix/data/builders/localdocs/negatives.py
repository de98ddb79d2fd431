"""Hard negatives: the lexically closest same-package document (IDF-weighted overlap) plus random ones."""
from __future__ import annotations

import math
import random
from collections import Counter, defaultdict

from drmix.data.builders.localdocs.clean import _tokens
from drmix.data.builders.localdocs.options import Pair


def add_hard_negatives(pairs: list[Pair], pool: list[Pair], *, num_negatives: int, seed: int) -> None:
    """Give each pair ``num_negatives`` negatives from ``pool`` with the same root package, in place.

    The first is the pool positive with the highest IDF-weighted term overlap with the query
    (``sum idf(t) / sqrt(len(doc))`` over shared terms t; terms in more than a quarter of the pool's
    documents, and more than 10, are ignored as stop words), the rest are drawn at random; a pair's own positive,
    documents of the same object and documents that contain the query verbatim are never chosen. A root with too few documents borrows from the
    whole family.
    """
    if num_negatives <= 0:
        return
    docs = [set(_tokens(p.positive)) for p in pool]
    n = len(pool)
    df = Counter(t for d in docs for t in d)
    idf = {t: math.log((n + 1) / (c + 0.5)) for t, c in df.items() if c <= max(10, n // 4)}
    norm = [math.sqrt(max(1, len(d))) for d in docs]
    postings: dict[str, list[int]] = defaultdict(list)
    for j, d in enumerate(docs):
        for t in d:
            if t in idf:
                postings[t].append(j)
    by_root: dict[str, list[int]] = defaultdict(list)
    for j, p in enumerate(pool):
        by_root[p.root].append(j)
    root_of = [p.root for p in pool]
    rng = random.Random(seed)
    for pair in pairs:
        same_root = len(by_root[pair.root]) > num_negatives + 1
        allowed = by_root[pair.root] if same_root else list(range(n))

        def usable(j: int) -> bool:
            return (not same_root or root_of[j] == pair.root) and pool[j].key != pair.key \
                and pool[j].positive != pair.positive and query_l not in pool[j].positive.lower()

        query_l = pair.query.lower()

        scores: dict[int, float] = defaultdict(float)
        for t in sorted(set(_tokens(pair.query))):  # a fixed summation order: ties break the same way
            w = idf.get(t)
            if w is not None:
                for j in postings[t]:
                    scores[j] += w
        ranked = sorted((j for j in scores if usable(j)), key=lambda j: (-scores[j] / norm[j], j))
        chosen = ranked[:1]
        tries = 0
        while len(chosen) < num_negatives and tries < 50 * num_negatives:
            tries += 1
            j = allowed[rng.randrange(len(allowed))]
            if usable(j) and j not in chosen and pool[j].positive not in {pool[c].positive for c in chosen}:
                chosen.append(j)
        pair.negatives = [pool[j].positive for j in chosen]


