"""Intervals and paired significance tests over per-query scores (used by ``drmix compare``, the recipes and
the benchmarks): one place for the formulas.

* :func:`t_interval` -- mean and half-width of the Student-t interval, ``t_{(1+c)/2, n-1} · sd / sqrt(n)``
  (``sd`` with ``n - 1`` degrees of freedom); over seeds or over paired query differences.
* :func:`t_test` -- the paired t-test of ``mean(d) = 0`` on the differences ``d`` (two-sided, scipy's
  ``ttest_1samp``, identical to ``ttest_rel`` on the two score vectors) with its 95% interval.
* :func:`randomization_test` -- Fisher's randomisation (sign-flip) test of ``sum_i w_i d_i`` (two-sided): under
  the null each query's difference keeps or flips its sign with probability 1/2. It is scipy's
  ``stats.permutation_test`` with ``permutation_type="samples"`` on the one sample ``w · d`` (scipy then flips
  signs): exact -- every one of the ``2^n`` sign patterns -- when ``2^n <= permutations``, otherwise
  ``permutations`` random patterns from a seeded generator with ``p = (1 + hits) / (1 + permutations)`` per
  side (Phipson & Smyth 2010); the two-sided p is twice the smaller one-sided p, at most 1.
* :func:`paired_summary` -- the t-test as a dictionary (``n``, ``mean``, ``low``, ``high``, ``p``) for tables
  that pool every query of every dataset.
* :func:`wilcoxon_test` -- the Wilcoxon signed-rank test of paired differences (two-sided, zeros dropped:
  scipy's ``stats.wilcoxon`` with ``zero_method="wilcox"``), the rank-based check beside the t-test.
* :func:`kendall_tau` -- Kendall's tau-b between two scorings of the same items with its two-sided p (scipy's
  ``stats.kendalltau``: the exact null distribution for small samples without ties).

The recipes and the benchmarks take their intervals and tests from here, never from scipy directly.

References: R. A. Fisher, *The Design of Experiments* (1935); M. D. Smucker, J. Allan, B. Carterette, "A
comparison of statistical significance tests for information retrieval evaluation", CIKM 2007.
"""
from __future__ import annotations

import math

import numpy as np


def t_interval(values, confidence: float = 0.95, *, undefined: float = float("nan")) -> tuple[float, float]:
    """``(mean, half_width)`` of the Student-t interval of the mean; the half-width is ``undefined`` (NaN, or
    e.g. 0 for a table of one seed) for fewer than 2 values."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    n = x.size
    mean = float(x.mean()) if n else float("nan")
    if n < 2:
        return mean, undefined
    return mean, float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)


def t_test(values) -> tuple[float, float, float]:
    """``(p, low, high)``: paired t-test of ``mean(values) = 0`` (two-sided) and its 95% interval.

    With fewer than 2 values p is NaN and the interval collapses to the mean; with zero spread p is 1 when
    the mean is 0 and 0 otherwise (scipy would return NaN).
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    mean, half = t_interval(x)
    if x.size < 2:
        return float("nan"), mean, mean
    if float(x.std(ddof=1)) == 0:
        return (1.0 if mean == 0 else 0.0), mean, mean
    return float(stats.ttest_1samp(x, 0.0).pvalue), mean - half, mean + half


def randomization_test(diffs, weights=None, *, permutations: int = 10000, seed: int = 0) -> float:
    """Two-sided Fisher randomisation (sign-flip) p-value of ``sum_i w_i d_i`` (``w = 1/n`` by default)."""
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    if n == 0:
        return float("nan")
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)
    wd = w * d
    if n < 2 or not np.any(wd):    # one query's two sign patterns (or all-zero differences) tie: p = 1 exactly
        return 1.0

    def total(x, axis):
        return np.sum(x, axis=axis)

    res = stats.permutation_test((wd,), total, permutation_type="samples", vectorized=True,
                                 n_resamples=permutations, batch=2000, alternative="two-sided", rng=seed)
    return float(res.pvalue)


def paired_summary(diffs) -> dict[str, float]:
    """The paired t-test of ``diffs`` as ``{n, mean, low, high, p}`` (interval and p NaN below 2 values)."""
    x = np.asarray(diffs, dtype=np.float64)
    p, low, high = t_test(x)
    if x.size < 2:
        low = high = float("nan")
    return {"n": int(x.size), "mean": float(x.mean()) if x.size else float("nan"), "low": float(low),
            "high": float(high), "p": float(p)}


def wilcoxon_test(diffs, *, zero: float = 1e-12) -> float | None:
    """Two-sided Wilcoxon signed-rank p of paired differences; differences within ``zero`` of 0 are dropped
    (``zero_method="wilcox"``); None when none is left."""
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    d = d[np.abs(d) > zero]
    if d.size == 0:
        return None
    return float(stats.wilcoxon(d, zero_method="wilcox").pvalue)


def kendall_tau(x, y) -> tuple[float, float]:
    """``(tau, p)``: Kendall's tau-b of two scorings of the same items and its two-sided p (NaN for fewer than
    2 items, or when one scoring is constant)."""
    from scipy import stats

    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan"), float("nan")
    res = stats.kendalltau(a, b)
    return float(res.statistic), float(res.pvalue)
