"""The audit's headline sentence, by hand: what to drop and down-weight, with the numbers the values hold."""
from __future__ import annotations

from drmix.recipes.audit.analysis import Analysis
from drmix.recipes.audit.report import headline
from drmix.recipes.audit.values import Value


def _analysis(verdicts: dict[str, str]) -> Analysis:
    loo = {n: Value(n, -0.0078, -0.0134, -0.0021, 0.0076, 400, (-0.0078,)) for n in verdicts}
    return Analysis(list(verdicts), loo, verdicts=verdicts)


def test_the_headline_names_what_to_drop_and_down_weight_with_its_interval():
    text = headline(_analysis({"a": "drop", "b": "down-weight", "c": "keep"}))
    assert text.startswith("Drop a (removing it raised the dev nDCG@10 by +0.0078, 95% interval [+0.0021, +0.0134], "
                           "p 0.0076); down-weight b (removing it helped within noise and the agreeing cheap signals "
                           "mark it harmful); keep the other 1.")


def test_several_down_weighted_collections_are_each_named():
    text = headline(_analysis({"a": "down-weight", "b": "down-weight", "c": "keep", "d": "keep"}))
    assert text == ("Down-weight a and b (removing each helped within noise and the agreeing cheap signals mark each "
                    "harmful); keep the other 2.")
    assert headline(_analysis({"a": "keep", "b": "keep"})).startswith("Keep all 2 collections: removing none")
