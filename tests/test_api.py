"""drmix.train with objects, as SentenceTransformerTrainer takes them: a SentenceTransformer, datasets, a
sentence-transformers loss and evaluators (examples/python_api/train_objects.py runs here too)."""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from drmix.config import TrainConfig
from drmix.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parent.parent


def _beir(tmp_path, name, n=12):
    from drmix.data.beir import write_beir

    corpus = {f"d{i}": {"title": "", "text": f"{name} document {i}"} for i in range(n)}
    queries = {f"q{i}": f"{name} question {i}" for i in range(n)}
    judged = {f"q{i}": {f"d{i}": 1} for i in range(n)}
    return write_beir(tmp_path / name, corpus, queries, {"train": judged, "test": judged})


def test_example_trains_from_objects_and_records_the_evaluator(tiny_model_path, tmp_path, monkeypatch):
    dirs = [_beir(tmp_path, n) for n in ("alpha", "beta")]
    out = tmp_path / "run"
    script = ROOT / "examples" / "python_api" / "train_objects.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--output-dir", str(out), "--model", tiny_model_path,
                                      "--data", f"alpha={dirs[0]}", "--data", f"beta={dirs[1]}",
                                      "--eval", str(dirs[0]), "--steps", "2", "--batch-size", "4"])
    runpy.run_path(str(script), run_name="__main__")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval" in r]
    assert [r["step"] for r in evals] == [2]
    scores = evals[0]["eval"]
    assert "alpha/cosine_ndcg@10" in scores and 0.0 <= scores["alpha/cosine_ndcg@10"] <= 1.0
    weights = json.loads((out / "weights.json").read_text())
    assert weights["collections"] == ["alpha", "beta"]
    card = (out / "model" / "README.md").read_text()
    assert "loss:MultipleNegativesRankingLoss" in card and "cosine_ndcg@10" in card
    assert "Evaluation during training" in (out / "report.html").read_text()


def test_one_dataset_is_one_collection_and_the_model_object_is_trained(tiny_model_path, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer

    import drmix
    import drmix.train.trainer  # sets drmix.train to the package, which still trains

    assert callable(drmix.train)
    model = SentenceTransformer(tiny_model_path, device="cpu")
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    rows = {"anchor": [f"q {i}" for i in range(8)], "positive": [f"p {i}" for i in range(8)]}
    cfg = TrainConfig(output_dir=str(tmp_path / "run"), max_steps=1, batch_size=4, device="cpu",
                      show_progress=False, warmup_ratio=0.0, learning_rate=1e-3)
    result = drmix.train(cfg, model=model, train_dataset=Dataset.from_dict(rows), loss="mnrl")
    assert json.loads((result.output_dir / "weights.json").read_text())["collections"] == ["train"]
    assert f"name_or_path: {tiny_model_path}" in (result.output_dir / "config.yaml").read_text()  # the model's folder
    assert not torch.cat([p.detach().flatten() for p in model.parameters()]).equal(before)
    assert json.loads(json.dumps(result.details))["loss"] == "MultipleNegativesRankingLoss"


@pytest.mark.parametrize("data, match", [(["not", "datasets"], "is a list"), ({"a": [1, 2]}, "not a datasets"),
                                         ({}, "holds no dataset")])
def test_bad_train_dataset(tmp_path, data, match):
    import drmix

    with pytest.raises(DataError, match=match):
        drmix.train(TrainConfig(output_dir=str(tmp_path / "run")), train_dataset=data)


def test_nanobeir_offline_fails_before_anything_loads(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from drmix.api import default_listeners

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))       # nothing cached
    with pytest.raises(ConfigError, match="NanoBEIR's datasets .* could not be loaded .*HF_HUB_OFFLINE"):
        default_listeners(TrainConfig(evaluator=["nanobeir:nfcorpus"]))
    with pytest.raises(ConfigError, match="unknown evaluator 'beir'"):
        default_listeners(TrainConfig(evaluator=["beir"]))
    with pytest.raises(ConfigError, match="no dataset 'nfc'.* nfcorpus"):
        default_listeners(TrainConfig(evaluator=["nanobeir:nfc"]))
