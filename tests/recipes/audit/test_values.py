"""Each collection's value: paired over the dev queries, averaged over seeds, with the t-test's interval."""
from __future__ import annotations

import math

import pytest

from drmix.recipes.audit.values import flatten_scores, paired_value


def test_paired_value_by_hand():
    # one seed, four queries: with - without = +0.1, +0.3, -0.1, +0.1 -> mean 0.1, sd 0.1633, t(3) 3.1824
    with_it = [{"a": 0.5, "b": 0.7, "c": 0.2, "d": 0.4}]
    without = [{"a": 0.4, "b": 0.4, "c": 0.3, "d": 0.3}]
    v = paired_value("x", with_it, without)
    half = 3.182446305284263 * math.sqrt(((0.0) ** 2 + 0.2 ** 2 + 0.2 ** 2 + 0.0 ** 2) / 3) / 2
    assert (v.name, v.queries) == ("x", 4)
    assert v.mean == pytest.approx(0.1)
    assert (v.low, v.high) == (pytest.approx(0.1 - half), pytest.approx(0.1 + half))
    assert v.per_seed == pytest.approx((0.1,))
    # the paired t-test of the differences: t = 0.1 / (0.1633 / 2) = 1.2247 with 3 degrees of freedom, whose
    # two-sided p has a closed form: 1 - (2 / pi) (t / (sqrt(3) (1 + t^2 / 3)) + atan(t / sqrt(3)))
    t = 0.1 / (math.sqrt(0.08 / 3) / 2)
    p = 1 - (2 / math.pi) * (t / (math.sqrt(3) * (1 + t * t / 3)) + math.atan(t / math.sqrt(3)))
    assert v.p == pytest.approx(p)


def test_seeds_are_averaged_per_query_before_the_test_and_kept_apart_per_seed():
    with_it = [{"a": 0.6, "b": 0.6}, {"a": 0.4, "b": 0.8}]
    without = [{"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}]
    v = paired_value("x", with_it, without)
    # per query over seeds: a (+0.1 - 0.1) / 2 = 0, b (+0.1 + 0.3) / 2 = 0.2; per seed: +0.1, +0.1
    assert v.mean == pytest.approx(0.1)
    assert v.per_seed == pytest.approx((0.1, 0.1))
    assert v.queries == 2


def test_only_queries_every_run_scored_are_paired():
    v = paired_value("x", [{"a": 1.0, "b": 0.0, "c": 0.5}], [{"a": 0.5, "b": 0.0}])
    assert v.queries == 2 and v.mean == pytest.approx(0.25)
    with pytest.raises(ValueError, match="share no scored query"):
        paired_value("x", [{"a": 1.0}], [{"b": 1.0}])
    with pytest.raises(ValueError, match="1 runs with it and 2 without"):
        paired_value("x", [{"a": 1.0}], [{"a": 1.0}, {"a": 0.0}])


def test_flatten_keeps_queries_of_different_dev_sets_apart():
    flat = flatten_scores({"scifact": {"1": 0.5}, "nfcorpus": {"1": 0.25}})
    assert flat == {"scifact/1": 0.5, "nfcorpus/1": 0.25}
