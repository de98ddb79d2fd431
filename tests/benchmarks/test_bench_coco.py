"""benchmarks/bench_coco.py: the tables of docs/benchmarks.md from per-query scores, against hand values."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_coco as bc  # noqa: E402

ZERO = {"scifact": {"q1": 0.5, "q2": 0.25}, "nfcorpus": {"n1": 0.25, "n2": 0.0}}
BASE = [{"scifact": {"q1": 0.5, "q2": 0.5}, "nfcorpus": {"n1": 0.25, "n2": 0.25}},      # average 0.375
        {"scifact": {"q1": 0.75, "q2": 0.25}, "nfcorpus": {"n1": 0.25, "n2": 0.25}}]    # average 0.375
COCO = [{"scifact": {"q1": 0.75, "q2": 0.75}, "nfcorpus": {"n1": 0.5, "n2": 0.25}},     # average 0.5625
        {"scifact": {"q1": 0.75, "q2": 0.75}, "nfcorpus": {"n1": 0.5, "n2": 0.5}}]      # average 0.625


def test_tables_by_hand():
    text, summary, tests = bc.result_tables({"coco-uniform": COCO, "base-uniform": BASE}, ZERO, [0, 1],
                                            "the 2-layer model, not fine-tuned")
    lines = text.splitlines()
    half = 12.706204736174698 * (0.0625 / math.sqrt(2)) / math.sqrt(2)     # t(0.975, 1) * sd / sqrt(2)
    assert lines[:5] == [
        "| model | SciFact | NFCorpus | average | per seed (0 / 1) | 95% interval (seeds) |",
        "|---|---:|---:|---:|---|---|",
        "| the 2-layer model, not fine-tuned | 0.3750 | 0.1250 | 0.2500 | | |",
        "| base-uniform (fine-tuning only) | 0.5000 | 0.2500 | 0.3750 | 0.3750 / 0.3750 | [0.3750, 0.3750] |",
        f"| coco-uniform (COCO on the targets → fine-tuning) | 0.7500 | 0.4375 | 0.5938 | 0.5625 / 0.6250 | "
        f"[{0.59375 - half:.4f}, {0.59375 + half:.4f}] |"]
    assert summary["coco-uniform"]["per_seed"] == [0.5625, 0.625]
    # over queries (each averaged over the seeds): differences 0.125, 0.375 (SciFact), 0.25, 0.125 (NFCorpus)
    d = [0.125, 0.375, 0.25, 0.125]
    mean = sum(d) / 4
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / 3) / 2
    t = mean / se                                         # 3 df: F(t) = 1/2 + (t/(sqrt3 (1 + t^2/3)) + atan(t/sqrt3))/pi
    p = 2 * (1 - (0.5 + (t / (math.sqrt(3) * (1 + t * t / 3)) + math.atan(t / math.sqrt(3))) / math.pi))
    test = tests["COCO on the targets vs no COCO"]
    assert (test["n"], test["mean"]) == (4, mean) and test["p"] == pytest.approx(p)
    assert (test["low"], test["high"]) == pytest.approx((mean - 3.182446305284263 * se, mean + 3.182446305284263 * se))
    # per seed: 0.5625 - 0.375 and 0.625 - 0.375; their t-test: t = 7 with 1 df, p = 1 - 2 atan(7) / pi
    assert test["per_seed"] == [0.1875, 0.25] and test["seed_p"] == pytest.approx(1 - 2 * math.atan(7) / math.pi)
    assert lines[6:] == [
        "| comparison | Δ nDCG@10 [95% CI over the 4 queries] | p (paired t over queries) | per-seed Δ | "
        "p (paired t over seeds) |",
        "|---|---:|---:|---|---:|",
        f"| COCO on the targets vs no COCO | **+0.2188** [+{mean - 3.182446305284263 * se:.4f}, "
        f"+{mean + 3.182446305284263 * se:.4f}] | {p:#.2g} | +0.1875 / +0.2500 | 0.090 |"]


def test_one_seed_has_no_interval_and_a_loss_is_written_with_a_minus():
    text, _, tests = bc.result_tables({"base-uniform": COCO[:1], "coco-uniform": BASE[:1]}, ZERO, [0])
    assert "| coco-uniform (COCO on the targets → fine-tuning) | 0.5000 | 0.2500 | 0.3750 | 0.3750 | – (one seed) |" \
        in text
    assert "| −0.1875 | –" in text and tests["COCO on the targets vs no COCO"]["mean"] == -0.1875
