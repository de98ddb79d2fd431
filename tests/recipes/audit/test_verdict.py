"""The verdict rule, the recommended weights and the learned methods refused."""
from __future__ import annotations

import pytest

from drmix.recipes.audit.values import Value
from drmix.recipes.audit.verdict import DOWN_WEIGHT, DROP, KEEP, recommend, refused, verdict


def value(mean: float, low: float, high: float) -> Value:
    return Value("x", mean, low, high, 0.5, 10, (mean,))


@pytest.mark.parametrize("v, harmful, voters, expected", [
    (value(-0.02, -0.03, -0.001), [], [], DROP),                       # the whole interval below 0
    (value(-0.02, -0.03, -0.001), [], ["tdro"], DROP),                  # whatever the signals say
    (value(-0.02, -0.05, 0.01), ["tdro", "infdds"], ["tdro", "infdds", "doremi"], DOWN_WEIGHT),   # 2 of 3 agree
    (value(-0.02, -0.05, 0.01), ["tdro"], ["tdro", "infdds"], KEEP),    # 1 of 2 is not more than half
    (value(-0.02, -0.05, 0.01), [], [], KEEP),                          # no signal agrees with leave-one-out
    (value(0.01, -0.05, 0.07), ["tdro", "infdds"], ["tdro", "infdds"], KEEP),   # removing it did not help
    (value(0.0, -0.05, 0.05), ["tdro"], ["tdro"], KEEP),                # exactly 0 is not below
    (value(0.03, 0.01, 0.05), ["tdro"], ["tdro"], KEEP),                # it helps
])
def test_the_rule(v, harmful, voters, expected):
    assert verdict(v, harmful, voters) == expected


def test_recommended_weights_by_hand():
    w, none_left = recommend({"a": KEEP, "b": DOWN_WEIGHT, "c": DROP, "d": KEEP})
    # shares 1, 0.5, 0, 1 of 2.5
    assert w == pytest.approx({"a": 0.4, "b": 0.2, "c": 0.0, "d": 0.4})
    assert list(w) == ["a", "b", "c", "d"] and not none_left
    w, _ = recommend({"a": KEEP, "b": DOWN_WEIGHT}, down_weight=0.25)
    assert w == pytest.approx({"a": 0.8, "b": 0.2})


def test_everything_dropped_keeps_uniform_and_says_so():
    w, none_left = recommend({"a": DROP, "b": DROP})
    assert none_left and w == {"a": 0.5, "b": 0.5}


def test_a_method_is_refused_when_it_raises_a_flagged_collection_above_uniform():
    verdicts = {"a": KEEP, "noisy": DROP, "c": DOWN_WEIGHT, "d": KEEP}
    learned = {"groupdro": {"a": 0.2, "noisy": 0.4, "c": 0.2, "d": 0.2},     # noisy above 1/4
               "tdro": {"a": 0.3, "noisy": 0.1, "c": 0.26, "d": 0.34},        # c above 1/4
               "doremi": {"a": 0.25, "noisy": 0.25, "c": 0.25, "d": 0.25}}    # exactly uniform: not above
    assert refused(learned, verdicts) == {"groupdro": ["noisy"], "tdro": ["c"]}
