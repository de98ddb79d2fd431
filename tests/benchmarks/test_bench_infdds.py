"""benchmarks/bench_infdds.py: a cached test score is keyed on the model's files, the test sets and the length."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_infdds as bi  # noqa: E402

from drmix.data.beir import BeirDataset  # noqa: E402


def test_score_key_changes_with_the_model_files_the_test_caps_and_the_length(tmp_path):
    full = BeirDataset(root=Path("/d/nfcorpus"), corpus={f"d{i}": {"text": f"doc {i}"} for i in range(20)},
                       queries={f"q{i}": f"query {i}" for i in range(5)},
                       qrels={f"q{i}": {f"d{i}": 1} for i in range(5)}, split="test")
    small = bi.small_test_set(full, queries=3, docs=10, judged_per_query=3, seed=0)
    model = tmp_path / "model"
    model.mkdir()
    (model / "modules.json").write_text("[]")
    args = argparse.Namespace(doc_max_length=96)
    key = bi.evaluation_key(str(model), {"nfcorpus": small}, args)
    assert bi.evaluation_key(str(model), {"nfcorpus": small}, args) == key
    assert bi.evaluation_key(str(model), {"nfcorpus": full}, args) != key                     # other caps
    assert bi.evaluation_key(str(model), {"nfcorpus": small}, argparse.Namespace(doc_max_length=32)) != key
    (model / "modules.json").write_text("[{}]")                                                # saved again
    assert bi.evaluation_key(str(model), {"nfcorpus": small}, args) != key
