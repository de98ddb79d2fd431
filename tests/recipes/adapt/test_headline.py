"""The sentence at the top of ``drmix adapt``'s report (:mod:`drmix.recipes.adapt.headline`): the gain over uniform
fine-tuning and over COCO -> uniform, and its parts (COCO, the synthetic train set, the mixture), from hand-made
scores."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from drmix.recipes.adapt.headline import gain_parts, headline, report_headline


def test_every_part_by_hand_and_the_sentence():
    # uniform fine-tuning 0.400; COCO -> uniform 0.414; uniform+synthetic 0.417; the adapted infdds+synthetic 0.418
    scores = {"uniform": 0.414, "uniform+synthetic": 0.417, "infdds+synthetic": 0.418}
    p = gain_parts(scores, "infdds+synthetic", uniform=0.400)
    assert p.gain == pytest.approx(0.018) and p.over_coco_uniform == pytest.approx(0.004)
    assert p.coco == pytest.approx(0.014) and p.synthetic == pytest.approx(0.003) and p.mixture == pytest.approx(0.001)
    assert p.coco + p.synthetic + p.mixture == pytest.approx(p.gain)          # the parts add up to the gain
    text = headline(scores, "infdds+synthetic", uniform=0.400, where="the labelled test split of scifact",
                    p_uniform=0.001, p_coco=0.3)
    assert text == ("The adapted model (infdds+synthetic) beats uniform fine-tuning by +0.018 nDCG@10 (p 0.001) on "
                    "the labelled test split of scifact; it beats COCO → uniform by +0.004 (p 0.3); by part of the "
                    "recipe: COCO +0.014, the synthetic train set +0.003, the mixture +0.001. Most of the gain came "
                    "from COCO.")


def test_negative_parts_are_written_with_their_sign_and_named():
    # COCO lost 0.010, the synthetic set gained 0.020, the learned mixture lost 0.005: the gain is +0.005
    scores = {"uniform": 0.410, "uniform+synthetic": 0.430, "tdro:reweight+synthetic": 0.425}
    text = headline(scores, "tdro:reweight+synthetic", uniform=0.420, where="the synthetic test split")
    assert "beats uniform fine-tuning by +0.005 nDCG@10 on the synthetic test split" in text
    assert "beats COCO → uniform by +0.015" in text and "(p " not in text          # no test given: no p
    assert "COCO -0.010, the synthetic train set +0.020, the mixture -0.005." in text
    assert "Most of the gain came from the synthetic train set." in text
    assert text.endswith("Lowered the score: COCO, the mixture.")
    lost = headline({"uniform": 0.39, "size": 0.38}, "size", uniform=0.40, where="x", p_uniform=2e-6)
    assert "trails uniform fine-tuning by 0.020 nDCG@10 (p 2e-06) on x; it trails COCO → uniform by 0.010;" in lost
    assert "Most of the gain" not in lost


def test_without_uniform_synthetic_the_synthetic_set_and_the_mixture_are_not_parted():
    scores = {"uniform": 0.410, "infdds+synthetic": 0.430}
    p = gain_parts(scores, "infdds+synthetic", uniform=0.400)
    assert p.synthetic is None and p.mixture is None and p.synthetic_and_mixture == pytest.approx(0.020)
    text = headline(scores, "infdds+synthetic", uniform=0.400, where="x")
    assert ("COCO +0.010, the synthetic train set and the mixture together +0.020 (no uniform+synthetic candidate "
            "to part them).") in text
    assert "Most of the gain came from the synthetic train set and the mixture." in text


def test_a_chosen_mixture_without_the_synthetic_set_and_coco_uniform_itself():
    p = gain_parts({"uniform": 0.41, "size": 0.43, "uniform+synthetic": 0.5}, "size", uniform=0.40)
    assert p.synthetic is None and p.mixture == pytest.approx(0.02) and p.coco == pytest.approx(0.01)
    text = headline({"uniform": 0.4104}, "uniform", uniform=0.4100, where="x", p_uniform=0.93)
    assert text.startswith("The adapted model (uniform: COCO → uniform) ties with uniform fine-tuning "
                           "(0.000 nDCG@10, p 0.93) on x;")
    assert "COCO → uniform by" not in text and text.endswith("by part of the recipe: COCO 0.000.")


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
                             synthetic_test=synthetic, comparisons=comparisons)
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
