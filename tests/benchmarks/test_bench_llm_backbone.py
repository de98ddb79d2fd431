"""benchmarks/bench_llm_backbone.py: the seeded subsample, the summary's statistics, the GPU preset's budget."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from drmix.data.beir import BeirDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_llm_backbone as bb  # noqa: E402


def test_subsample_keeps_judged_documents_and_is_seeded():
    corpus = {f"d{i}": {"title": "", "text": str(i)} for i in range(50)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(20)}
    make = lambda: BeirDataset(Path("x"), dict(corpus), {q: q for q in qrels}, dict(qrels), "test")  # noqa: E731
    a = bb.subsample(make(), 5, 10, seed=0)
    b = bb.subsample(make(), 5, 10, seed=0)
    assert a.queries == b.queries and a.corpus.keys() == b.corpus.keys()
    assert len(a.queries) == 5 and len(a.corpus) == 15
    assert all(d in a.corpus for q in a.qrels for d in a.qrels[q])


def test_summary_means_intervals_and_paired_contrasts():
    rng = np.random.default_rng(0)
    cells = []
    for seed in range(3):
        for v, shift in (("lasttoken-causal", 0.0), ("mean-causal", 0.1), ("lasttoken-bidir", 0.2),
                         ("mean-bidir", 0.3)):
            pq = {f"q{i}": float(np.clip(0.3 + shift + rng.normal(0, 0.01), 0, 1)) for i in range(12)}
            cells.append({"variant": v, "seed": seed, "scores": {"ndcg@10": float(np.mean(list(pq.values())))},
                          "losses": [2.0, 1.0], "per_query": pq})
    text = bb.summarise(cells, bb.PRESETS["cpu"], "cmd")
    def cells_of(prefix):
        row = next(line for line in text.splitlines() if line.startswith(prefix))
        return [c.strip() for c in row.strip("| ").split("|")]

    assert abs(float(cells_of("| mean-bidir |")[1]) - 60.0) < 1.0  # 100 x (0.3 + 0.3) up to the noise
    diff = cells_of("| mean-bidir - mean-causal")
    assert abs(float(diff[1]) - 20.0) < 1.0
    lo, hi = (float(x) for x in diff[2].strip("[]").split(","))
    assert lo < float(diff[1]) < hi
    assert float(diff[3]) < 0.01  # every query moves the same way


def test_gpu_preset_estimate_is_the_lease_line_and_says_whether_it_fits():
    from _lease import COMMAND_LIMIT_S, RUN_OVERHEAD_S, START_S, estimate_line

    p = bb.PRESETS["gpu"]
    est = bb.estimate(p)
    # hand count: 4 variants x 3 seeds; each cell 6 * 135e6 * (200 * 64 * (64 + 2 * 256)) training FLOPs and
    # 2 * 135e6 * (5183 * 256 + 300 * 64) encoding FLOPs at 30% of 989 TFLOP/s, plus 15 s loading
    cell = (6 * 135e6 * 200 * 64 * 576 + 2 * 135e6 * (5183 * 256 + 300 * 64)) / (0.3 * 989e12)
    assert est.seconds() == pytest.approx(START_S + 12 * RUN_OVERHEAD_S + 12 * (cell + 15 - RUN_OVERHEAD_S))
    assert est.seconds() < COMMAND_LIMIT_S and "(fits one 10-minute command" in estimate_line(est)
    longer = bb.estimate({**p, "steps": 2000})
    assert longer.seconds() > COMMAND_LIMIT_S and "DOES NOT fit" in estimate_line(longer)
