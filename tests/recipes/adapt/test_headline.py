"""The sentence at the top of ``drmix adapt``'s report (:mod:`drmix.recipes.adapt.headline`): the gain over uniform
fine-tuning and over COCO -> uniform, and its parts (COCO, the synthetic train set, the mixture), from hand-made
scores."""
from __future__ import annotations

import pytest

from drmix.recipes.adapt.headline import gain_parts, headline, names_and


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


def test_names_are_joined_as_a_sentence_lists_them():
    assert names_and(["a"]) == "a" and names_and(["a", "b"]) == "a and b"
    assert names_and(["scifact", "nfcorpus", "fiqa"]) == "scifact, nfcorpus and fiqa"
