"""The outputs of ``drmix adapt`` (:mod:`drmix.recipes.adapt.report`): the report's first sentence read from a
finished run's result (on the labelled split when given, else on the synthetic test)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from drmix.recipes.adapt.report import report_headline


class _Comparison:
    def __init__(self, label: str, t_p: float):
        self.rows = {label: []}
        self._p = t_p

    def average(self, label):
        return SimpleNamespace(t_p=self._p)


def _suite(scores: dict[str, float]):
    # two datasets per model: their mean is the score
    return SimpleNamespace(results={m: {"a": {"ndcg@10": v - 0.01}, "b": {"ndcg@10": v + 0.01}}
                                    for m, v in scores.items()})


def test_the_report_reads_the_labelled_split_when_given_else_the_synthetic_test():
    adapted = "adapted (size+synthetic)"
    models = {"base model": "b", "uniform fine-tuning": "u", "COCO → uniform": "c", adapted: "s"}
    candidates = {"uniform": "c", "uniform+synthetic": "us", "size+synthetic": "s"}
    labelled = _suite({"base model": 0.3, "uniform fine-tuning": 0.40, "COCO → uniform": 0.41, adapted: 0.44,
                       "uniform": 0.41, "uniform+synthetic": 0.43, "size+synthetic": 0.44})
    synthetic = _suite({"base model": 0.5, "uniform fine-tuning": 0.60, "COCO → uniform": 0.70, adapted: 0.66,
                        "uniform+synthetic": 0.65})
    comparisons = {"test: vs uniform fine-tuning": _Comparison(adapted, 0.004),
                   "test: adapted vs COCO → uniform": _Comparison(adapted, 0.02),
                   "synthetic test: vs uniform fine-tuning": _Comparison(adapted, 0.5),
                   "synthetic test: adapted vs COCO → uniform": _Comparison(adapted, 0.6)}
    result = SimpleNamespace(models=models, selected="size+synthetic", candidates=candidates, labelled=labelled,
                             synthetic_test=synthetic, comparisons=comparisons, adapted=adapted)
    text, data = report_headline(result, "test")
    assert "by +0.040 nDCG@10 (p 0.004) on the labelled test split of a and b" in text and "+0.030 (p 0.02)" in text
    assert data["on"] == "labelled" and data["parts"]["coco"] == pytest.approx(0.01)
    assert data["parts"]["synthetic"] == pytest.approx(0.02) and data["parts"]["mixture"] == pytest.approx(0.01)
    result.labelled = None
    text, data = report_headline(result, "test")
    assert "(p 0.5) on the synthetic test split (no labelled data was given)" in text and "(p 0.6)" in text
    assert data["on"] == "synthetic test"
    # COCO +0.10, the synthetic set -0.05, the mixture +0.01 on the synthetic test
    assert data["parts"]["coco"] == pytest.approx(0.10) and data["parts"]["synthetic"] == pytest.approx(-0.05)
    assert data["parts"]["mixture"] == pytest.approx(0.01)
    assert "Lowered the score: the synthetic train set." in text
