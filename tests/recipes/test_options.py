"""A recipe's mappings are typed when its config is made: a strategy's options by the model the strategy registers,
a stage's overrides by the stage's config class; one line naming the field and the fix, before anything runs."""
from __future__ import annotations

import pytest

from drmix.errors import ConfigError
from drmix.recipes.coco import CocoPipelineConfig
from drmix.recipes.drama import DramaConfig
from drmix.recipes.tdro import PipelineConfig


def test_a_strategys_options_are_checked_by_its_registered_model_when_the_config_is_made():
    with pytest.raises(ConfigError, match="invalid idro option for strategy 'idro': clusterz") as e:
        CocoPipelineConfig(strategy="idro", idro={"clusterz": 2})
    assert "clusters" in e.value.fix                                 # the fix lists the model's fields
    with pytest.raises(ConfigError, match="invalid idro option .*clusters"):
        CocoPipelineConfig(strategy="idro", idro={"clusters": 0})     # and its bounds (ge=1)
    assert CocoPipelineConfig(strategy="idro", idro={"clusters": 2}).idro == {"clusters": 2}   # kept as given
    with pytest.raises(ConfigError, match="invalid influence option for strategy 'infdds': bogus"):
        DramaConfig(strategy="infdds", influence={"bogus": 1})
    with pytest.raises(ConfigError, match="invalid dro option .*: lr"):
        DramaConfig(strategy="static", dro={"lr": -1})               # options of a strategy not chosen: checked too
    with pytest.raises(ConfigError, match="strategy 'static' takes no options"):
        DramaConfig(strategy="static", strategy_options={"x": 1})
    with pytest.raises(ConfigError, match="invalid dro option for strategy 'doremi': smoothing"):
        PipelineConfig(strategy="doremi", dro={"smoothing": 1.5})    # lt=1


def test_a_stages_overrides_are_checked_by_its_config_class_when_the_config_is_made():
    with pytest.raises(ConfigError) as e:
        CocoPipelineConfig(coco={"max_stepz": 2})
    assert e.value.message == "invalid --coco override max_stepz: not a drmix field; did you mean max_steps."
    assert e.value.fix == "write --coco KEY=VALUE with a field of `drmix pretrain coco --help`."
    with pytest.raises(ConfigError, match="invalid --coco override span_max_tokens"):
        CocoPipelineConfig(coco={"span_max_tokens": 0})
    with pytest.raises(ConfigError, match="invalid --stage1 override max_steps") as e:
        PipelineConfig(stage1={"max_steps": 0})
    assert "`drmix train --help`" in e.value.fix                     # a stage's keys are training fields
    from drmix.recipes.adapt import AdaptConfig

    with pytest.raises(ConfigError, match="invalid --coco override batch_size"):
        AdaptConfig(coco={"batch_size": "many"})
    with pytest.raises(ConfigError, match="invalid --stage1 override max_stepz"):
        AdaptConfig(stage1={"max_stepz": 3})
    with pytest.raises(ConfigError, match="invalid influence option .*: bogus"):
        AdaptConfig(influence={"bogus": 1})


def test_coco_refuses_the_static_weights_settings_under_idro_and_a_transfer_without_weights():
    """iDRO samples the collections uniformly: a mixture, its temperature, a weights file or a transfer would be
    ignored by both fine-tunings; static weights transfer only a weights file (refused before COCO trains for
    hours, not when the first fine-tuning starts)."""
    for flat, value in (("mixture", "size"), ("weights_file", "w.json"), ("transfer", "reweight"),
                        ("mixture_temperature", 3.0)):
        with pytest.raises(ConfigError) as e:
            CocoPipelineConfig(strategy="idro", **{flat: value})
        flag = "--" + flat.replace("_", "-")
        assert e.value.message.startswith(f"{flag} ({flat}) is not used by drmix pipeline coco with --strategy idro")
        assert e.value.fix == f"drop {flag}, or fine-tune with --strategy static."
    assert CocoPipelineConfig(strategy="idro", mixture="uniform").mixture.scheme == "uniform"    # the default is fine
    assert CocoPipelineConfig(mixture="file", weights_file="w.json", transfer="top:0.5").mixture.transfer == "top:0.5"
    with pytest.raises(ConfigError, match="--transfer needs --weights-file"):
        CocoPipelineConfig(transfer="reweight")
