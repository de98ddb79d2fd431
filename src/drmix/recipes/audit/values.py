"""Each collection's value from its reference runs, with a 95% interval: pure functions of per-query scores.

The value of collection ``i`` by **leave-one-out** is the dev nDCG@10 of the whole mixture minus that of the
mixture without ``i``, ``v_i = M(all) - M(all \\ {i})`` (positive: ``i`` helps the dev sets; negative: removing it
helps); by **add-one-in** it is the score of fine-tuning on ``i`` alone minus the starting model's,
``M({i}) - M(start)``. Both are paired over the same dev queries: for every query the difference of its two
nDCG@10 values, averaged over the seeds (each seed's two runs share their seed), and the value is the mean of
those differences over the pooled queries of every dev set with the paired t-test's 95% interval and p
(:func:`drmix.evaluation.significance.t_test`). The per-seed value (the mean difference in that seed alone) is
kept so a reader sees whether the seeds agree.

Leave-one-out as the reference of a data value: Koh & Liang, "Understanding Black-box Predictions via Influence
Functions" (ICML 2017, arXiv:1703.04730), which estimates exactly this retraining difference; RegMix (Liu et
al., arXiv:2407.01492) fits the same kind of small proxy runs over random mixtures instead.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

Scores = Mapping[str, float]          # query key ("dataset/query id") -> nDCG@10


@dataclass(frozen=True)
class Value:
    """One collection's value: the mean paired difference, its 95% interval and p, the queries it pools and its
    value in each seed."""

    name: str
    mean: float
    low: float
    high: float
    p: float
    queries: int
    per_seed: tuple[float, ...]

    def to_json(self) -> dict:
        return {**asdict(self), "per_seed": list(self.per_seed)}


def flatten_scores(per_dataset: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{dataset: {query: score}}`` -> ``{"dataset/query": score}`` (the pooled queries of every dev set)."""
    return {f"{d}/{q}": float(v) for d, qs in per_dataset.items() for q, v in qs.items()}


def paired_value(name: str, with_runs: Sequence[Scores], without_runs: Sequence[Scores]) -> Value:
    """The value of ``name`` from per-seed scores of the runs with it (``with_runs[s]``) and without it
    (``without_runs[s]``), paired over the queries every run scored (seed ``s`` of one with seed ``s`` of the
    other)."""
    from drmix.evaluation.significance import t_test

    if not with_runs or len(with_runs) != len(without_runs):
        raise ValueError(f"{name}: {len(with_runs)} runs with it and {len(without_runs)} without")
    queries = sorted(set.intersection(*(set(r) for r in (*with_runs, *without_runs))))
    if not queries:
        raise ValueError(f"{name}: the runs share no scored query")
    diffs = np.array([[a[q] - b[q] for q in queries] for a, b in zip(with_runs, without_runs)])
    per_query = diffs.mean(axis=0)
    p, low, high = t_test(per_query)
    return Value(name, float(per_query.mean()), float(low), float(high), float(p), len(queries),
                 tuple(float(x) for x in diffs.mean(axis=1)))
