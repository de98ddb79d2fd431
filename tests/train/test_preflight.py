"""The preflight reads what a strategy needs from its registered spec (drmix.train.preflight.check_strategy)."""
import pytest

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.mixture.registry import build_strategy
from drmix.train.preflight import check_strategy

NAMES = ["a", "b"]


def _check(**kw):
    cfg = TrainConfig(**kw)
    check_strategy(cfg, build_strategy(cfg, NAMES), NAMES)


def test_mixed_batches_are_required_by_the_dro_family_only():
    with pytest.raises(ConfigError, match="batching mixed"):
        _check(strategy="groupdro", batching="homogeneous")
    _check(strategy="groupdro", batching="mixed")
    _check(strategy="static", batching="homogeneous")
    cfg = TrainConfig(strategy="groupdro", batching="homogeneous")
    check_strategy(cfg, build_strategy(cfg, ["a"]), ["a"])  # one collection: nothing to compare, nothing refused


def test_a_reference_is_required_when_the_measurement_compares_with_one():
    with pytest.raises(ConfigError, match="reference model"):
        _check(strategy="tdro", batching="mixed")
    with pytest.raises(ConfigError, match="reference model"):
        _check(strategy="groupdro", batching="mixed", tdro={"measurement": "difference"})
    _check(strategy="tdro", batching="mixed", reference_model="some/model")
    _check(strategy="tdro", batching="mixed", tdro={"measurement": "raw"})  # raw losses: no reference


def test_dev_sets_are_required_by_the_influence_family():
    with pytest.raises(ConfigError, match="dev set") as err:
        _check(strategy="multidds")
    assert "--dev" in err.value.fix
    _check(strategy="multidds", dev=["some/dir"])
    _check(strategy="idro")


def test_an_unregistered_strategy_is_not_checked():
    class Custom:
        name = "not-registered"

    check_strategy(TrainConfig(batching="homogeneous"), Custom(), NAMES)
