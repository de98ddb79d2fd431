"""``--mixture file``: a weights file in JSON or YAML (as the help says), or the collections' own ``weight:``
keys from a YAML collection list (as docs/data.md says)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.mixture.static import file_mixture_weights
from drmix.train.trainer import Trainer


def _collections(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a", "b"):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"query": f"{name} q{i}", "positive": f"{name} "
                                                                  f"doc {i}"}) + "\n" for i in range(6)))
    return folder


@pytest.mark.parametrize("name,text", [("w.yaml", "a: 1\nb: 3\n"), ("w.yml", "{a: 1, b: 3}\n"),
                                       ("w.json", '{"a": 1, "b": 3}'),
                                       ("run.yaml", "collections: [a, b]\nweights: [0.5, 1.5]\n")])
def test_weights_file_in_json_or_yaml(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert file_mixture_weights(tmp_path / name, ["b", "a"]).tolist() == [0.75, 0.25]


def test_bad_yaml_weights_name_the_line(tmp_path):
    (tmp_path / "w.yaml").write_text("a: 1\nb: [3\n")
    with pytest.raises(ConfigError) as e:
        file_mixture_weights(tmp_path / "w.yaml", ["a", "b"])
    assert "not valid YAML" in e.value.message and e.value.line is not None
    (tmp_path / "w.json").write_text("a: 1\n")
    with pytest.raises(ConfigError, match="not valid JSON"):
        file_mixture_weights(tmp_path / "w.json", ["a", "b"])


def test_collection_weight_keys_without_a_weights_file():
    assert file_mixture_weights(None, ["a", "b"], [2.0, 6.0]).tolist() == [0.25, 0.75]
    with pytest.raises(ConfigError) as e:
        file_mixture_weights(None, ["a", "b"], [2.0, None])
    assert "['b']" in e.value.message and "--weights-file" in e.value.fix
    with pytest.raises(ConfigError):
        file_mixture_weights(None, ["a", "b"], [0.0, 0.0])


def test_trainer_mixes_by_the_yaml_weight_keys(tiny_model_path, tmp_path):
    data = _collections(tmp_path / "data")
    mix = tmp_path / "mix.yaml"
    mix.write_text("- {path: data/a.jsonl, weight: 1.0}\n- {path: data/b.jsonl, weight: 3.0}\n")
    cfg = TrainConfig(model=tiny_model_path, data=[str(mix)], output_dir=str(tmp_path / "run"), mixture="file",
                      batch_size=4, device="cpu", show_progress=False)
    trainer = Trainer(cfg)
    assert trainer.names == ["a", "b"]
    assert np.allclose(trainer.strategy.weights, [0.25, 0.75])
    # a weights file wins over the keys (and says so)
    (tmp_path / "w.yaml").write_text("a: 1\nb: 1\n")
    trainer = Trainer(cfg.replace(weights_file=str(tmp_path / "w.yaml")))
    assert np.allclose(trainer.strategy.weights, [0.5, 0.5])


@pytest.mark.parametrize("text,expected", [('{"a": 1e308, "b": 1e308}', [0.5, 0.5]),
                                           ('{"a": 1.7e308, "b": 0.85e308}', [2 / 3, 1 / 3]),
                                           ('{"a": 1e308, "b": 0}', [1.0, 0.0])])
def test_weights_near_the_float_limit_are_normalised(tmp_path, text, expected):
    """Their sum overflows to inf; the weights are still scaled to sum to 1 (by the largest one first)."""
    (tmp_path / "w.json").write_text(text)
    assert np.allclose(file_mixture_weights(tmp_path / "w.json", ["a", "b"]), expected, rtol=1e-12, atol=0)


def test_collection_weights_near_the_float_limit_are_normalised():
    assert np.allclose(file_mixture_weights(None, ["a", "b"], [1.5e308, 0.5e308]), [0.75, 0.25], rtol=1e-12)
