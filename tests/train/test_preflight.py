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


def test_a_mixture_only_static_training_reads_is_refused_for_a_strategy_that_samples_by_its_own_rule(tmp_path):
    for strategy in ("idro", "groupdro", "multidds"):
        kw = {"batching": "mixed", "dev": ["some/dir"]}
        with pytest.raises(ConfigError, match=f"--mixture size sets the weights of static training; --strategy "
                                              f"{strategy} samples") as err:
            _check(strategy=strategy, mixture="size", **kw)
        assert err.value.fix.startswith("drop --mixture")
        _check(strategy=strategy, mixture="uniform", **kw)               # the default: nothing to ignore
    w = tmp_path / "w.json"
    w.write_text('{"a": 0.7, "b": 0.3}')
    with pytest.raises(ConfigError, match="--weights-file .*w.json sets the weights of static training"):
        _check(strategy="idro", weights_file=str(w))
    _check(strategy="static", mixture="size")
    _check(strategy="static", mixture="file", weights_file=str(w))


def test_an_unregistered_strategy_is_not_checked():
    class Custom:
        name = "not-registered"

    check_strategy(TrainConfig(batching="homogeneous"), Custom(), NAMES)


# -- the schedule: an absurd length refused, a warm-up that keeps the learning rate negligible named -----------
def test_epochs_or_steps_beyond_any_run_are_refused_before_anything_loads():
    from drmix.train.preflight import MAX_STEPS, check_schedule

    with pytest.raises(ConfigError) as e:
        check_schedule(TrainConfig(epochs=1e15, batch_size=32), 1000)
    assert e.value.message.startswith("--epochs 1e+15 over 1,000 examples (32 a step) makes 3.12e+16 optimiser steps")
    assert "--epochs" in e.value.fix and "--max-steps" in e.value.fix
    with pytest.raises(ConfigError, match="makes endless optimiser steps"):
        check_schedule(TrainConfig(epochs=float("inf")), 1000)
    with pytest.raises(ConfigError, match=f"--max-steps {MAX_STEPS + 1:,} makes"):
        check_schedule(TrainConfig(max_steps=MAX_STEPS + 1), 1000)
    with pytest.raises(ConfigError, match="--learning-rate inf is not a finite number"):
        check_schedule(TrainConfig(learning_rate=float("inf")), 1000)
    # 1e6 epochs x 32,000 examples / (32 x 1) = 1e9 steps: the bound itself is allowed
    assert len(check_schedule(TrainConfig(epochs=1e6, batch_size=32), 32_000)) == 1   # with the warm-up warning


def test_a_warm_up_that_keeps_the_learning_rate_negligible_is_named():
    from drmix.train.preflight import check_schedule

    assert check_schedule(TrainConfig(epochs=3, batch_size=32), 10_000) == []       # 938 steps, 94 of warm-up
    assert check_schedule(TrainConfig(max_steps=10_000_000), 10) == []              # 1e6 steps of warm-up: the limit
    [longer] = check_schedule(TrainConfig(max_steps=100, warmup_steps=1_000, learning_rate=2e-5), 10)
    assert longer.startswith("the warm-up (1,000 steps) is longer than the run (100 steps)")
    assert "it ends at 2e-06" in longer                                             # 2e-5 x 100 / 1000
    [long] = check_schedule(TrainConfig(max_steps=20_000_000), 10)                  # warm-up 2e6 steps
    assert "stays under 1% of --learning-rate 2e-05 for the first 20,000 steps" in long


def test_the_trainer_refuses_epochs_1e15_before_the_model_loads_or_anything_is_written(tmp_path, monkeypatch):
    from train_helpers import make_collections

    from drmix.train.trainer import Trainer

    data = make_collections(tmp_path / "data", n=8)
    cfg = TrainConfig(data=[str(data)], output_dir=str(tmp_path / "run"), epochs=1e15, batch_size=4, device="cpu")
    import drmix.train.trainer as trainer

    monkeypatch.setattr(trainer, "load_retriever", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ConfigError, match="makes .* optimiser steps"):
        Trainer(cfg)
    assert not (tmp_path / "run").exists()
