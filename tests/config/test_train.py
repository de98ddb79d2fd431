"""TrainConfig's own rules: --resume-from implies --resume; a pipeline refuses it."""
import pytest

from drmix.config import RecipeConfig, TrainConfig


def test_resume_from_implies_resume():
    assert TrainConfig(resume_from="runs/x/checkpoints/step-4").run.resume is True
    assert TrainConfig().run.resume is False


def test_a_pipeline_refuses_resume_from():
    with pytest.raises(ValueError, match="resumes each of its stages"):
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
    for cls, parts in own.items():
        assert issubclass(cls, (RecipeConfig, FineTuningParts)) and not issubclass(cls, TrainConfig), cls
        assert list(cls.groups()) == shared + parts, cls
        assert [k for k, f in cls.flat_fields().items() if f.group is None] == \
            ["dro", "influence", "idro", "strategy_options"]
    assert not issubclass(TrainConfig, RecipeConfig) and list(TrainConfig.groups()) == shared
    stage = TrainConfig.from_parts(DramaConfig(corpus=["c"]), output_dir="o")
    assert type(stage) is TrainConfig
    # DRAMA's own defaults reach its student's stage; the recipe's parts do not
    assert (stage.contrastive.num_negatives, stage.model.pooling, stage.model.lora_r) == (7, "mean", 0)
    assert not hasattr(stage, "recipe") and not hasattr(stage, "test")
