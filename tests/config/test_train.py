"""TrainConfig's own rules: --resume-from implies --resume; a recipe's config carries only the training fields its
stages read and refuses the others in one line."""
from typing import Any

import pytest

from drmix.config import RecipeConfig, TrainConfig


def test_resume_from_implies_resume():
    assert TrainConfig(resume_from="runs/x/checkpoints/step-4").run.resume is True
    assert TrainConfig().run.resume is False


def test_a_pipeline_refuses_resume_from():
    from drmix.errors import ConfigError

    with pytest.raises(ConfigError, match="resumes each of its stages"):
        RecipeConfig(resume_from="runs/x/checkpoints/step-2")


def test_recipe_configs_are_composed_of_parts_not_train_configs():
    """A recipe's config is the fine-tuning parts, its output folder, the final evaluation and its own parts; it is
    no TrainConfig (api.train cannot be handed one), and a stage's TrainConfig is composed from its parts."""
    from drmix.config import FineTuningParts
    from drmix.recipes.coco import CocoPipelineConfig
    from drmix.recipes.drama import DramaConfig
    from drmix.recipes.tdro import PipelineConfig

    shared = ["model", "data", "contrastive", "mixture", "optim", "eval", "run"]
    own = {PipelineConfig: ["test", "stages"], CocoPipelineConfig: ["test", "recipe"],
           DramaConfig: ["test", "recipe", "augment"]}
    # the strategies' options each recipe's stages read: stage 1's DRO; the fine-tunings' iDRO; the student's any
    options = {PipelineConfig: ["dro"], CocoPipelineConfig: ["idro"],
               DramaConfig: ["dro", "influence", "idro", "strategy_options"]}
    for cls, parts in own.items():
        assert issubclass(cls, (RecipeConfig, FineTuningParts)) and not issubclass(cls, TrainConfig), cls
        assert list(cls.groups()) == shared + parts, cls
        assert [k for k, f in cls.flat_fields().items() if f.group is None] == options[cls]
    assert not issubclass(TrainConfig, RecipeConfig) and list(TrainConfig.groups()) == shared
    stage = TrainConfig.from_parts(DramaConfig(corpus=["c"]), output_dir="o")
    assert type(stage) is TrainConfig
    # DRAMA's own defaults reach its student's stage; the recipe's parts do not
    assert (stage.contrastive.num_negatives, stage.model.pooling, stage.model.lora_r) == (7, "mean", 0)
    assert not hasattr(stage, "recipe") and not hasattr(stage, "test")


#: the training fields each recipe leaves out (its stages never read them)
LEFT_OUT = {
    "drmix pipeline tdro": {"mixture", "mixture_temperature", "weights_file", "transfer", "batching", "dev",
                            "dev_split", "influence", "idro", "strategy_options", "resume", "resume_from"},
    "drmix pipeline coco": {"reference_model", "dev", "dev_split", "dro", "influence", "strategy_options", "resume",
                            "resume_from"},
    "drmix pipeline drama": {"resume", "resume_from"},
    "drmix adapt": {"mixture", "mixture_temperature", "weights_file", "transfer", "strategy", "reference_model",
                    "dev", "dev_split", "eval_every", "evaluator", "idro", "strategy_options", "resume",
                    "resume_from"},
}


def _recipes():
    from drmix.recipes.adapt import AdaptConfig
    from drmix.recipes.coco import CocoPipelineConfig
    from drmix.recipes.drama import DramaConfig
    from drmix.recipes.tdro import PipelineConfig

    return (PipelineConfig, CocoPipelineConfig, DramaConfig, AdaptConfig)


def test_each_recipe_leaves_out_the_training_fields_its_stages_never_read():
    for cls in _recipes():
        assert set(cls.left_out_fields()) == LEFT_OUT[cls.command], cls.command
        assert not set(cls.flat_fields()) & LEFT_OUT[cls.command]
        assert not set(cls().model_dump(mode="json")["run"]) & {"resume", "resume_from"}   # nor records them


@pytest.mark.parametrize("given, flag", [
    ({"weights_file": "w.json"}, "--weights-file"),                              # flat
    ({"mixture": {"strategy": "tdro", "transfer": "reweight"}}, "--transfer"),     # grouped, beside a kept field
    ({"mixture": "size"}, "--mixture"),                                           # the flag that names a part
    ({"contrastive": {"batching": "mixed"}}, "--batching"),
    ({"infdds": {"update_every": 5}}, "--influence"),                             # an older name
    ({"run": {"resume": True}}, "--resume"),
])
def test_a_left_out_field_given_a_value_is_refused_in_one_line_naming_the_recipe(given, flag):
    from drmix.errors import ConfigError
    from drmix.recipes.tdro import PipelineConfig

    with pytest.raises(ConfigError) as e:
        PipelineConfig(**given)
    text = e.value.format()
    assert f"{flag} (" in text and "is not used by drmix pipeline tdro: " in text and "Fix: " in text
    assert "\n" not in text


def test_a_left_out_field_at_its_default_is_dropped_so_an_earlier_record_still_loads(tmp_path):
    """pipeline.yaml of an earlier version recorded every training field (the left-out ones at their defaults): it
    loads into the same config, and what the recipe records now has none of them."""
    import yaml

    from drmix.config import load_config
    from drmix.recipes.coco import CocoPipelineConfig

    earlier = {**TrainConfig(output_dir="runs/c").model_dump(mode="json"),
               "test": {"test_data": ["t"]}, "recipe": {"corpus": ["c"]}}
    assert earlier["mixture"]["reference_model"] is None and earlier["dro"] == {} and earlier["run"]["resume"] is False
    f = tmp_path / "pipeline.yaml"
    f.write_text(yaml.safe_dump(earlier))
    cfg = load_config(CocoPipelineConfig, f)
    assert cfg == CocoPipelineConfig(output_dir="runs/c", test_data=["t"], corpus=["c"])
    assert "reference_model" not in yaml.safe_load(cfg.dump_yaml())["mixture"]
    earlier["mixture"]["reference_model"] = "some/model"              # a value: refused, naming the file
    f.write_text(yaml.safe_dump(earlier))
    from drmix.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(CocoPipelineConfig, f)
    assert e.value.path == str(f) and "--reference-model (reference_model) is not used by drmix pipeline coco" in \
        e.value.message


def test_the_refused_fields_of_every_recipe_say_why_and_the_fix():
    from drmix.errors import ConfigError

    for cls in _recipes():
        for flat, field in cls.left_out_fields().items():
            value = {"flag": True} if field.info.annotation == dict[str, Any] else 7
            with pytest.raises(ConfigError) as e:
                cls.model_validate({flat: value})
            assert e.value.message.startswith(f"--{flat.replace('_', '-')} ({flat}) is not used by {cls.command}: ")
            why, fix = cls.left_out[flat]
            assert why in e.value.message and e.value.fix and e.value.fix.endswith(".")
