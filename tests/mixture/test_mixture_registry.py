"""The strategy registry (drmix.mixture.registry) on its own: the options of every strategy family are checked
whichever strategy is selected, the error names each bad option, and build_strategy hands the builder the
collections' weight: keys and refuses --transfer for learned strategies."""
from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel, ConfigDict, Field

from drmix.config import RecipeConfig, TrainConfig
from drmix.errors import ConfigError
from drmix.mixture.registry import (StrategySpec, build_strategy, check_config, get_strategy, parse_options,
                                    register_strategy, strategy_of, unregister_strategy)


def test_valid_settings_pass_the_check():
    for strategy in ("groupdro", "static", "infdds", "idro"):
        check_config(TrainConfig(strategy=strategy))
    check_config(TrainConfig(strategy="groupdro", influence={"update_every": 5}, idro={"clusters": 3}))
    # generic options with no strategy of their own to validate them are left alone when another is selected
    check_config(TrainConfig(strategy="groupdro", strategy_options={"x": 1}))


@pytest.mark.parametrize("strategy, field, values, family", [
    ("static", "influence", {"update_every": 0}, "influence option for strategy 'infdds'"),
    ("groupdro", "idro", {"clusters": 0}, "idro option for strategy 'idro'"),
    ("infdds", "dro", {"lrr": 1}, "dro option for strategy 'doremi'"),
])
def test_options_of_a_strategy_not_selected_are_still_checked(strategy, field, values, family):
    """A typo under `influence:` fails even when training with static weights (it would otherwise be ignored
    until someone selects the strategy); the error is the owner family's, as if it were selected."""
    with pytest.raises(ConfigError, match=family):
        check_config(TrainConfig(strategy=strategy, **{field: values}))


def test_a_plugin_options_field_that_the_config_lacks_does_not_break_the_others():
    class Opts(BaseModel):
        model_config = ConfigDict(extra="forbid")
        k: int = 1

    register_strategy(StrategySpec(name="reg-plugin", build=lambda *a: None, options=Opts,
                                   options_field="reg_plugin_options", help="test"))
    try:
        check_config(TrainConfig(strategy="groupdro"))
    finally:
        unregister_strategy("reg-plugin")


def test_the_error_names_every_bad_option_with_its_position():
    class Opts(BaseModel):
        model_config = ConfigDict(extra="forbid")
        sizes: list[int] = []
        rate: float = Field(0.5, gt=0)

    spec = StrategySpec(name="reg-errors", build=lambda *a: None, options=Opts, help="test")
    with pytest.raises(ConfigError) as e:
        parse_options(spec, {"sizes": [1, "x"], "rate": -1})
    msg = str(e.value)
    assert "sizes.1: " in msg and "; rate: " in msg


def _file(tmp_path, text='{"a": 1, "b": 3}'):
    f = tmp_path / "w.json"
    f.write_text(text)
    return str(f)


def test_build_strategy_passes_the_weight_keys_and_refuses_transfer_for_learned_strategies(tmp_path, caplog):
    names = ["a", "b"]
    s = build_strategy(TrainConfig(data=["x"], mixture="file"), names, [3.0, 1.0])
    s.setup(names, [5, 5])
    assert s.sampling_weights().tolist() == [0.75, 0.25]
    with pytest.raises(ConfigError, match="have none"):              # no keys given: every collection lacks one
        build_strategy(TrainConfig(data=["x"], mixture="file"), names)
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.static"):
        build_strategy(TrainConfig(data=["x"]), names)                 # no keys: nothing to warn about
    assert not caplog.records
    s = build_strategy(TrainConfig(data=["x"], transfer="reweight", weights_file=_file(tmp_path)), names)
    s.setup(names, [5, 5])
    assert s.name == "reweight" and s.sampling_weights().tolist() == [0.25, 0.75]
    with pytest.raises(ConfigError, match="not to strategy 'tdro'"):
        build_strategy(TrainConfig(data=["x"], strategy="tdro", transfer="reweight", weights_file=_file(tmp_path)),
                       names)


@pytest.mark.parametrize("strategy", ["tdro", "idro", "infdds", "static"])
def test_a_config_without_the_strategys_options_field_gets_its_defaults(strategy):
    # a recipe's config carries only the options mappings its stages read (RecipeConfig: none of them)
    config = RecipeConfig(strategy=strategy)
    spec = get_strategy(strategy)
    assert not hasattr(config, spec.field)
    check_config(config)
    assert strategy_of(config) == (spec, None if spec.options is None else spec.options())
