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


# -- the Python API's arguments: checked up front, one line naming the argument, what it got and the fix -------
class _NotAnEvaluator:
    """An evaluator class passed instead of an instance."""


@pytest.mark.parametrize("kwargs, argument, got", [
    ({"model": 123}, "model", "int 123"),
    ({"callbacks": [1, 2]}, "callbacks[0]", "int 1"),
    ({"callbacks": [print, _NotAnEvaluator]}, "callbacks[1]", "type "),
    ({"listeners": ["report"]}, "listeners[0]", "str 'report'"),
    ({"strategy": "groupdro"}, "strategy", "str 'groupdro'"),
    ({"objective": "infonce"}, "objective", "str 'infonce'"),
    ({"loss": 0.5}, "loss", "float 0.5"),
    ({"evaluator": 7}, "evaluator", "int 7"),
    ({"evaluator": [print, _NotAnEvaluator]}, "evaluator[1]", "type "),
    ({"collections": ["a.jsonl"]}, "collections[0]", "str 'a.jsonl'"),
])
def test_train_refuses_a_wrong_type_before_anything_loads_or_is_written(tmp_path, kwargs, argument, got):
    import drmix
    from drmix.errors import ArgumentError

    cfg = TrainConfig(output_dir=str(tmp_path / "run"), data=[str(tmp_path / "absent")])  # never read
    with pytest.raises(ArgumentError) as e:
        drmix.train(cfg, **kwargs)
    message = str(e.value)
    assert message.startswith(f"drmix.train({argument}=...) must be ") and f", not {got}" in message
    assert e.value.fix and " Fix: " in message and "\n" not in message
    assert isinstance(e.value, TypeError)          # what Python code catches for a wrong type
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("config", [42, ["data.jsonl"], None])
def test_a_config_of_another_type_is_refused(config):
    import drmix
    from drmix.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"drmix.train\(config=...\) must be a TrainConfig, a mapping"):
        drmix.train(config)


def test_the_trainer_checks_the_same_arguments(tmp_path):
    from drmix.errors import ArgumentError
    from drmix.train.trainer import Trainer

    cfg = TrainConfig(output_dir=str(tmp_path / "run"), data=[str(tmp_path / "absent")])
    with pytest.raises(ArgumentError, match=r"^Trainer\(callbacks\[0\]=...\) must be .*, not int 1\."):
        Trainer(cfg, callbacks=[1])
    with pytest.raises(ArgumentError, match=r"^Trainer\(model=...\) must be .*, not float 1\.5\."):
        Trainer(cfg, model=1.5)
    with pytest.raises(DataError, match="collection path does not exist"):   # a mapping: validated, then read
        Trainer({"output_dir": str(tmp_path / "run"), "data": [str(tmp_path / "absent")]})
    assert not (tmp_path / "run").exists()


def test_a_mapping_or_a_yaml_file_is_the_config_and_a_wrong_field_is_named(tmp_path):
    import drmix

    with pytest.raises(ConfigError, match=r"invalid configuration: max_steps: Input should be a valid integer"):
        drmix.train({"output_dir": str(tmp_path / "run"), "max_steps": "many"})
    yaml_file = tmp_path / "train.yaml"
    yaml_file.write_text(f"data: [{tmp_path / 'absent'}]\noutput_dir: {tmp_path / 'run'}\n")
    with pytest.raises(DataError, match="absent: collection path does not exist"):   # read as the config
        drmix.train(str(yaml_file))
    assert not (tmp_path / "run").exists()


def test_evaluator_names_are_the_configs_evaluators_checked_before_training(tmp_path):
    """``evaluator="nanobeir:..."`` as ``--evaluator`` takes it: an unknown dataset is refused before anything
    loads (it used to train, write checkpoints, then fail calling the string)."""
    import drmix

    for evaluator in ("nanobeir:nfc", ["nanobeir:nfc"]):
        with pytest.raises(ConfigError, match="NanoBEIR has no dataset 'nfc'"):
            drmix.train(TrainConfig(output_dir=str(tmp_path / "run"), data=[str(tmp_path / "absent")]),
                        evaluator=evaluator)
    assert not (tmp_path / "run").exists()


def test_a_model_path_and_a_mapping_config_train_as_the_cli_would(tiny_model_path, tmp_path):
    """``model="PATH"`` is the config's model (loaded as --model is) and the config a mapping of its fields."""
    import drmix

    data = _beir(tmp_path, "alpha", n=8)
    out, steps = tmp_path / "run", []
    result = drmix.train({"output_dir": str(out), "data": [str(data)], "max_steps": 1, "batch_size": 4,
                          "device": "cpu", "show_progress": False}, model=tiny_model_path,
                         callbacks=lambda ctx: steps.append(ctx.step))   # one callable, no list
    assert result.steps == 1 and steps == [1]
    assert f"name_or_path: {tiny_model_path}" in (out / "config.yaml").read_text()
    assert (out / "model" / "modules.json").is_file()


# -- the other entry points of drmix: the same one-line errors, and a single path taken as one ------------------
def _entry_point_calls(d):
    import numpy as np

    import drmix

    index = drmix.DenseIndex.build(np.eye(2, dtype=np.float32), ["a", "b"])
    return {
        "evaluate_model(model=...)": lambda: drmix.evaluate_model(123, [d]),
        "evaluate_model(data_dirs=...)": lambda: drmix.evaluate_model(None, 5),
        "evaluate_model(data_dirs[1]=...)": lambda: drmix.evaluate_model(None, [d, 5]),
        "evaluate_run(qrels=...)": lambda: drmix.evaluate_run([("q", "d")], {}),
        "evaluate_run(qrels['q']=...)": lambda: drmix.evaluate_run({"q": ["d"]}, {}),
        "evaluate_run(run=...)": lambda: drmix.evaluate_run({"q": {"d": 1}}, "run.trec"),
        "load_beir(root=...)": lambda: drmix.load_beir(5),
        "load_beir(split=...)": lambda: drmix.load_beir(d, split=3),
        "load_collections(specs=...)": lambda: drmix.load_collections(5),
        "load_collections(specs[1]=...)": lambda: drmix.load_collections([str(d), 5]),
        "load_encoder(name_or_path=...)": lambda: drmix.load_encoder(5),
        "info_nce(q=...)": lambda: drmix.info_nce([[1.0, 0.0]], torch.eye(1, 2)),
        "info_nce(negs=...)": lambda: drmix.info_nce(torch.eye(1, 2), torch.eye(1, 2), [[[0.0, 1.0]]]),
        "DenseIndex.build(ids=...)": lambda: drmix.DenseIndex.build(np.eye(2, dtype=np.float32), "ab"),
        "DenseIndex.build(embeddings=...)": lambda: drmix.DenseIndex.build("two texts", ["a", "b"]),
        "DenseIndex.load(directory=...)": lambda: drmix.DenseIndex.load(5),
        "search(queries=...)": lambda: index.search("what is a", 1),
        "DenseIndex.search(k=...)": lambda: index.search(np.eye(1, 2, dtype=np.float32), "1"),
    }


def test_every_entry_point_names_a_wrong_argument(tmp_path):
    from drmix.errors import ArgumentError

    d = _beir(tmp_path, "toy", n=3)
    for where, call in _entry_point_calls(d).items():
        with pytest.raises(ArgumentError) as e:
            call()
        assert str(e.value).startswith(f"{where} must be "), (where, str(e.value))
        assert e.value.fix and "\n" not in str(e.value)


def test_one_path_or_metric_is_taken_as_one_not_as_its_characters(tiny_model_path, tmp_path):
    import drmix

    d = _beir(tmp_path, "toy", n=4)
    report = drmix.evaluate_model(tiny_model_path, str(d), metrics="ndcg@10", show_progress=False)
    assert list(report.results) == ["toy"] and list(report.results["toy"]) == ["ndcg@10"]
    # the relevant document second: 1 / log2(3)
    assert drmix.evaluate_run({"q": {"d1": 1}}, {"q": {"d0": 0.9, "d1": 0.5}}, "ndcg@10") == \
        pytest.approx({"ndcg@10": 1 / __import__("math").log2(3)})
    collections = drmix.load_collections(str(d))
    assert [c.name for c in collections] == ["toy"] and len(collections[0]) == 4
