"""drmix.evaluation.significance: the t interval, the paired t-test and the randomisation test by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from drmix.evaluation.significance import paired_summary, randomization_test, t_interval, t_test, wilcoxon_test


def test_randomization_exact_enumeration_by_hand():
    # d = [1, 2, 3, 4]: observed mean 2.5; among the 16 sign patterns only all-plus and all-minus reach
    # |mean| >= 2.5 -> p = 2/16. With d = [1, 1, 1, -1]: |mean| >= 0.5 for every pattern whose sum is
    # +-2 or +-4: sums are (+-1 +-1 +-1 +-1): 4 ones -> counts of +2 or -2: C(4,1)+C(4,3) = 8, +-4: 2 -> 10/16.
    assert randomization_test(np.array([1.0, 2, 3, 4])) == pytest.approx(2 / 16)
    assert randomization_test(np.array([1.0, 1, 1, -1])) == pytest.approx(10 / 16)


def test_randomization_sampled_matches_exact_and_is_seeded():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.4, 0.1, -0.2, 0.6, 0.3, 0.2, 0.1, 0.05])  # 4096 patterns
    exact = randomization_test(d, permutations=5000)        # 4096 <= 5000: enumerated
    sampled = randomization_test(d, permutations=4000, seed=1)
    assert sampled == randomization_test(d, permutations=4000, seed=1)
    assert abs(sampled - exact) < 0.01
    # exact count: patterns with |sum of +-d| >= sum(d) = 2.45
    signs = ((np.arange(4096)[:, None] >> np.arange(12)) & 1) * 2 - 1
    assert exact == pytest.approx(float((np.abs(signs @ d) >= d.sum() - 1e-12).mean()))


def test_t_test_by_hand():
    # d = [1, 2, 3, 4]: mean 2.5, sd = sqrt(5/3), se = sd/2, t = 2.5 / se = 3.8730; df 3.
    # Two-sided p for t = 3.873 with 3 df = 0.030466 (t distribution); 95% half-width = 3.18245 * se.
    p, low, high = t_test(np.array([1.0, 2, 3, 4]))
    se = math.sqrt(5 / 3) / 2
    assert p == pytest.approx(0.030466, abs=2e-6)
    assert low == pytest.approx(2.5 - 3.182446 * se, abs=1e-5)
    assert high == pytest.approx(2.5 + 3.182446 * se, abs=1e-5)


def test_weighted_randomization_is_the_exact_sign_flip_test_of_the_weighted_sum():
    # 10 queries (1024 patterns <= 10000: exact); weights as in compare's average row.
    d = np.array([0.2, -0.1, 0.4, 0.0, 0.3, -0.2, 0.1, 0.5, -0.05, 0.25])
    w = np.array([0.1] * 4 + [0.05] * 6)
    signs = ((np.arange(1024)[:, None] >> np.arange(10)) & 1) * 2 - 1
    by_hand = float((np.abs(signs @ (w * d)) >= abs((w * d).sum()) - 1e-12).mean())
    assert randomization_test(d, w) == pytest.approx(by_hand)


def test_randomization_degenerate_cases():
    assert math.isnan(randomization_test(np.array([])))
    assert randomization_test(np.array([0.7])) == 1.0          # one query: both sign patterns tie
    assert randomization_test(np.zeros(50)) == 1.0


def test_t_interval_by_hand():
    mean, half = t_interval([1.0, 2.0, 3.0])                   # sd 1, t(0.975, 2) = 4.302653
    assert mean == 2.0 and half == pytest.approx(4.302652729911275 / math.sqrt(3))
    mean, half = t_interval([1.0, 2.0, 3.0], confidence=0.9)   # t(0.95, 2) = 2.919986
    assert half == pytest.approx(2.919985580355516 / math.sqrt(3))
    mean, half = t_interval([5.0])
    assert mean == 5.0 and math.isnan(half)


def test_t_test_degenerate_cases():
    assert t_test(np.array([0.5, 0.5, 0.5])) == (0.0, 0.5, 0.5)     # no spread, non-zero mean
    assert t_test(np.array([0.0, 0.0])) == (1.0, 0.0, 0.0)
    p, low, high = t_test(np.array([0.3]))
    assert math.isnan(p) and low == high == 0.3


def test_paired_summary_by_hand():
    s = paired_summary([1.0, 2.0, 3.0, 4.0])
    se = math.sqrt(5 / 3) / 2
    assert s["n"] == 4 and s["mean"] == 2.5 and s["p"] == pytest.approx(0.030466, abs=2e-6)
    assert s["low"] == pytest.approx(2.5 - 3.182446 * se, abs=1e-5)
    one = paired_summary([0.2])
    assert one["n"] == 1 and one["mean"] == 0.2 and math.isnan(one["low"]) and math.isnan(one["p"])


def test_two_values_get_an_interval_and_an_exact_test():
    # d = [1, 3]: mean 2, sd sqrt(2), se 1, t(0.975, 1) = 12.7062; t = 2 with 1 df: p = 1 - 2 atan(2) / pi
    mean, half = t_interval([1.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(12.706204736174698)
    p, low, high = t_test([1.0, 3.0])
    assert p == pytest.approx(1 - 2 * math.atan(2) / math.pi) and (low, high) == pytest.approx((2 - 12.7062047,
                                                                                               2 + 12.7062047))
    s = paired_summary([1.0, 3.0])
    assert (s["n"], s["mean"]) == (2, 2.0) and (s["low"], s["high"]) == pytest.approx((2 - 12.7062047, 2 + 12.7062047))
    # randomisation over two queries: sums +-1 +-3 = 4, 2, -2, -4; |sum| >= 4 in 2 of 4 patterns
    assert randomization_test([1.0, 3.0]) == 0.5


def test_empty_input_is_nan_without_numpy_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")           # numpy's "mean of empty slice" would be an error here
        mean, half = t_interval([])
        s = paired_summary([])
    assert math.isnan(mean) and math.isnan(half)
    assert s["n"] == 0 and all(math.isnan(s[k]) for k in ("mean", "low", "high", "p"))


def test_every_statistic_is_computed_in_float64_whatever_the_input():
    x32 = np.array([0.1, 0.25, 0.3, 0.55, 0.7], dtype=np.float32)
    x64 = x32.astype(np.float64)
    assert t_interval(x32) == t_interval(x64)
    assert t_test(x32) == t_test(x64)
    assert paired_summary(x32) == paired_summary(x64)
    d = np.array([0.3, -0.1, 0.2], dtype=np.float32)
    w = np.array([0.2, 0.3, 0.5], dtype=np.float32)
    assert randomization_test(d, w) == randomization_test(d.astype(np.float64), w.astype(np.float64))


def test_randomization_defaults_enumerate_up_to_13_queries_and_sample_10000_seeded_patterns_beyond():
    d13 = np.array([0.3, -0.1, 0.5, 0.2, 0.4, 0.1, -0.2, 0.6, 0.3, 0.2, 0.1, 0.05, -0.3])  # 8192 <= 10000: exact
    signs = ((np.arange(2 ** 13)[:, None] >> np.arange(13)) & 1) * 2 - 1
    assert randomization_test(d13) == pytest.approx(float((np.abs(signs @ d13) >= abs(d13.sum()) - 1e-12).mean()))
    d15 = np.concatenate([d13, [0.15, -0.05]])                                              # 32768: sampled
    p = randomization_test(d15)
    assert p == randomization_test(d15, permutations=10000, seed=0)
    assert p != randomization_test(d15, permutations=10000, seed=1)
    assert p != randomization_test(d15, permutations=9999, seed=0)
    hits = round(p * 10001) - 1                   # p = (1 + hits) / (1 + permutations) on each side, doubled
    assert 0 <= hits <= 10000


def test_weights_change_the_randomization_test():
    # one large difference with a small weight against five small ones: weighted, the five decide (p = 4/64:
    # only the patterns keeping the five signs, or flipping them all, reach |-0.089|); unweighted the large one
    # dominates every pattern (p = 1)
    d = np.array([1.0, -0.1, -0.1, -0.1, -0.1, -0.1])
    w = np.array([0.01, 0.198, 0.198, 0.198, 0.198, 0.198])
    signs = ((np.arange(64)[:, None] >> np.arange(6)) & 1) * 2 - 1
    weighted = float((np.abs(signs @ (w * d)) >= abs((w * d).sum()) - 1e-12).mean())
    unweighted = float((np.abs(signs @ d) >= abs(d.sum()) - 1e-12).mean())
    assert (weighted, unweighted) == (pytest.approx(4 / 64), 1.0)
    assert randomization_test(d, w) == pytest.approx(weighted)
    assert randomization_test(d) == pytest.approx(unweighted)


def test_t_interval_of_one_value_and_wilcoxon_hand_computed():
    mean, half = t_interval([1.0, 2.0, 3.0])     # sd 1, t(0.975, 2) = 4.302653
    assert mean == 2.0 and half == pytest.approx(4.302652729911275 / math.sqrt(3))
    assert t_interval([5.0], undefined=0.0) == (5.0, 0.0) and math.isnan(t_interval([5.0])[1])
    # W- = 2 (rank of |-0.2|): two-sided exact p = 2 * #{subsets of 1..5 summing <= 2} / 2^5 = 2 * 3 / 32
    assert wilcoxon_test([0.1, -0.2, 0.3, 0.4, 0.5]) == pytest.approx(0.1875)
    assert wilcoxon_test([0.1, -0.2, 0.0, 0.3, 1e-13, 0.4, 0.5]) == pytest.approx(0.1875)   # zeros dropped
    assert wilcoxon_test([0.0, 0.0]) is None
