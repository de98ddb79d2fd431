"""The cheap signals: their zero points, their agreement with the reference, who votes."""
from __future__ import annotations

import math

import pytest

from drmix.recipes.audit.agreement import Signal, kendall, mean_signal, votes, weight_signal


def test_kendall_tau_by_hand():
    reference = {"a": 0.3, "b": 0.2, "c": 0.1, "d": -0.1}
    same = Signal("infdds", {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}, 0.0)
    assert kendall(same, reference) == {"tau": pytest.approx(1.0), "p": pytest.approx(1 / 12), "n": 4}
    # one swap of six pairs: (5 - 1) / 6 = 2/3; exact p: 8 of 24 orderings are at least that far, two-sided 1/3
    one_swap = Signal("infdds", {"a": 4.0, "b": 3.0, "c": 1.0, "d": 2.0}, 0.0)
    t = kendall(one_swap, reference)
    assert t["tau"] == pytest.approx(2 / 3) and t["p"] == pytest.approx(1 / 3)
    reversed_ = Signal("infdds", {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, 0.0)
    assert kendall(reversed_, reference)["tau"] == pytest.approx(-1.0)


def test_kendall_leaves_out_what_a_signal_did_not_measure_and_a_constant_is_nan():
    reference = {"a": 0.3, "b": 0.2, "c": 0.1}
    t = kendall(Signal("x", {"a": 2.0, "b": float("nan"), "c": 1.0}, 0.0), reference)
    assert t["n"] == 2 and t["tau"] == pytest.approx(1.0)
    assert math.isnan(kendall(Signal("x", {"a": 1.0, "b": 1.0, "c": 1.0}, 0.0), reference)["tau"])


def test_zero_points():
    w = weight_signal("tdro", {"a": 0.5, "b": 0.3, "c": 0.2})
    assert w.zero == pytest.approx(1 / 3)
    assert w.harmful() == {"a": False, "b": True, "c": True}
    m = mean_signal("doremi", {"a": [1.0, 3.0], "b": [0.0, 0.0], "c": [1.0, 1.0]})
    assert m.values == {"a": 2.0, "b": 0.0, "c": 1.0} and m.zero == pytest.approx(1.0)   # the mean over collections
    assert m.harmful() == {"a": False, "b": True, "c": False}
    # a 95% t-interval of [1, 3]: 2 +- 12.706 * 1.4142 / 1.4142
    assert (m.low["a"], m.high["a"]) == (pytest.approx(2 - 12.7062, abs=1e-3), pytest.approx(2 + 12.7062, abs=1e-3))
    z = mean_signal("infdds", {"a": [-1.0, 1.0], "b": [-0.5, -0.1]}, zero=0.0)
    assert z.harmful() == {"a": False, "b": True}


def test_only_signals_that_agree_with_the_reference_vote():
    agreeing = Signal("infdds", {"a": 1.0, "b": -1.0, "c": -2.0}, 0.0)
    contrary = Signal("groupdro", {"a": 0.1, "b": 0.2, "c": 0.7}, 1 / 3)
    agreement = {"infdds": {"tau": 0.8}, "groupdro": {"tau": -0.8}}
    v = votes([agreeing, contrary], agreement)
    assert v[""] == ["infdds"]
    assert v["b"] == ["infdds"] and v["c"] == ["infdds"] and v["a"] == []
    assert votes([agreeing], {"infdds": {"tau": float("nan")}}) == {"": []}
