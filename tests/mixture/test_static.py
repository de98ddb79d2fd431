"""Static mixtures (drmix.mixture.static) and the Strategy defaults (drmix.mixture.base), by hand."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from drmix.config import TrainConfig
from drmix.data.batch import Batch
from drmix.errors import ConfigError
from drmix.mixture.base import Strategy
from drmix.mixture.static import StaticStrategy, build_static_strategy, file_mixture_weights, initial_weights


def test_initial_weights_by_hand():
    sizes = [100, 400, 900]
    assert initial_weights(sizes, "uniform").tolist() == pytest.approx([1 / 3] * 3, abs=1e-15)
    assert initial_weights(sizes, "size").tolist() == pytest.approx([1 / 14, 4 / 14, 9 / 14], abs=1e-15)
    # tau = 2: |D|^(1/2) = 10, 20, 30 -> 1/6, 2/6, 3/6 (the default temperature)
    assert initial_weights(sizes, "temperature").tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6], abs=1e-15)
    # tau = 0.5: |D|^2 = 1e4, 16e4, 81e4 -> / 98e4
    assert initial_weights(sizes, "temperature", temperature=0.5).tolist() == pytest.approx(
        [1 / 98, 16 / 98, 81 / 98], abs=1e-15)
    assert initial_weights(sizes, "temperature", temperature=1.0).tolist() == pytest.approx(
        initial_weights(sizes, "size").tolist(), abs=1e-15)
    with pytest.raises(ConfigError, match="temperature must be > 0"):
        initial_weights(sizes, "temperature", temperature=0.0)
    with pytest.raises(ConfigError, match="unknown mixture 'bogus'"):
        initial_weights(sizes, "bogus")


def test_static_strategy_setup_weights_and_outputs():
    s = StaticStrategy(scheme="temperature", temperature=0.5)
    s.setup(["a", "b", "c"], [100, 400, 900])
    assert s.sampling_weights().tolist() == pytest.approx([1 / 98, 16 / 98, 81 / 98], abs=1e-15)
    assert s.final_weights() == {"strategy": "static", "collections": ["a", "b", "c"],
                                 "weights": pytest.approx([1 / 98, 16 / 98, 81 / 98], abs=1e-15)}
    given = StaticStrategy(np.array([1.0, 3.0]))
    given.setup(["a", "b"], [5, 5])
    assert given.sampling_weights().tolist() == [0.25, 0.75]
    with pytest.raises(ConfigError, match="2 weights for 3 collections"):
        StaticStrategy(np.array([1.0, 3.0])).setup(["a", "b", "c"], [1, 1, 1])
    # the loss is the plain mean; after_step does nothing
    losses = torch.tensor([1.0, 2.0, 6.0])
    assert s.loss(losses, Batch(["q"] * 3, ["p"] * 3, [[]] * 3, np.zeros(3, dtype=np.int64)), None).item() == 3.0


def test_base_strategy_defaults():
    s = Strategy()
    s.setup(["a", "b", "c", "d"], [1, 2, 3, 4])
    assert s.sampling_weights().tolist() == [0.25] * 4
    assert s.final_weights() == {"strategy": "base", "collections": ["a", "b", "c", "d"], "weights": [0.25] * 4}
    assert s.trajectory_record(3) is None and s.state_dict() == {}
    assert s.loss(torch.tensor([1.0, 3.0]), None, None).item() == 2.0


def _weights_file(tmp_path, text="a: 1\nb: 3\n"):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    return str(f)


def test_file_mixture_weights_from_file_and_keys(tmp_path, caplog):
    f = _weights_file(tmp_path)
    assert file_mixture_weights(f, ["b", "a"]).tolist() == [0.75, 0.25]
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.static"):
        assert file_mixture_weights(f, ["a", "b"], [None, None]).tolist() == [0.25, 0.75]
    assert not caplog.records                                       # no keys given: nothing to override
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.static"):
        assert file_mixture_weights(f, ["a", "b"], [5.0, None]).tolist() == [0.25, 0.75]
    assert any("overrides" in r.message for r in caplog.records)    # the file wins over the keys, and says so
    assert file_mixture_weights(None, ["a", "b", "c"], [1, 0, 3]).tolist() == [0.25, 0.0, 0.75]   # 0 drops one
    assert file_mixture_weights(None, ["a", "b"], [0.5, 0.5]).dtype == np.float64
    with pytest.raises(ConfigError, match=r"\['a', 'b'\] have none"):
        file_mixture_weights(None, ["a", "b"])
    for bad in ([-1.0, 2.0], [float("inf"), 1.0], [0.0, 0.0], [float("nan"), 1.0]):
        with pytest.raises(ConfigError, match="non-negative"):
            file_mixture_weights(None, ["a", "b"], bad)
    # weights below 1 are fine (only their sum must be positive)
    assert file_mixture_weights(None, ["a", "b"], [0.1, 0.3]).tolist() == pytest.approx([0.25, 0.75])


def test_build_static_strategy_routes_each_setting(tmp_path, caplog):
    f = _weights_file(tmp_path)
    names = ["a", "b"]
    cfg = TrainConfig(data=["x"], mixture="size")
    s = build_static_strategy(cfg, None, names, [None, None])
    s.setup(names, [1, 3])
    assert s.sampling_weights().tolist() == [0.25, 0.75]
    cfg = TrainConfig(data=["x"], mixture="temperature", mixture_temperature=0.5)
    s = build_static_strategy(cfg, None, names, [])
    s.setup(names, [1, 3])
    assert s.sampling_weights().tolist() == pytest.approx([0.1, 0.9])
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.static"):
        s = build_static_strategy(TrainConfig(data=["x"]), None, names, [2.0, None])
    assert any("only with --mixture file" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.static"):
        build_static_strategy(TrainConfig(data=["x"]), None, names, None)
    assert not caplog.records
    s = build_static_strategy(TrainConfig(data=["x"], mixture="file", weights_file=f), None, names, [None, None])
    s.setup(names, [5, 5])
    assert s.sampling_weights().tolist() == [0.25, 0.75]
    s = build_static_strategy(TrainConfig(data=["x"], mixture="file"), None, names, [3.0, 1.0])
    s.setup(names, [5, 5])
    assert s.sampling_weights().tolist() == [0.75, 0.25]
    s = build_static_strategy(TrainConfig(data=["x"], transfer="reweight", weights_file=f), None, names, None)
    s.setup(names, [5, 5])
    assert s.sampling_weights().tolist() == [0.25, 0.75] and s.name == "reweight"
    s = build_static_strategy(TrainConfig(data=["x"], transfer="top:0.5", weights_file=f), None, names, None)
    s.setup(names, [5, 5])
    assert s.sampling_weights().tolist() == [0.0, 1.0]
    with pytest.raises(ConfigError, match="--transfer needs --weights-file"):
        build_static_strategy(TrainConfig(data=["x"], transfer="reweight"), None, names, None)


def test_defaults_mix_uniformly_and_temperature_defaults_to_two():
    """Without a scheme the mixture is uniform (as --mixture's default); the temperature scheme without tau uses
    tau = 2, the config's default mixture_temperature."""
    assert initial_weights([1, 3]).tolist() == [0.5, 0.5]
    s = StaticStrategy()
    s.setup(["a", "b"], [1, 3])
    assert s.sampling_weights().tolist() == [0.5, 0.5]
    t = StaticStrategy(scheme="temperature")
    t.setup(["a", "b", "c"], [100, 400, 900])
    assert t.sampling_weights().tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6], abs=1e-15)
    assert TrainConfig(data=["x"]).mixture.mixture_temperature == t.temperature


def test_a_weights_file_without_a_training_collection_is_named_in_the_error(tmp_path):
    f = _weights_file(tmp_path)
    with pytest.raises(ConfigError, match="no weight for training collection") as e:
        file_mixture_weights(f, ["a", "b", "c"])
    assert e.value.path == f
