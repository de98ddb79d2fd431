"""Configuration models (pydantic), made of parts: :mod:`drmix.config.parts` (groups, flat names, roles,
reading YAML) and :mod:`drmix.config.train` (``TrainConfig``, the
parts every config is composed of, and ``RecipeConfig``, what a recipe's config is made of)."""
from drmix.config.parts import (
    HYPERPARAMETER,
    INPUT,
    OPERATIONAL,
    Config,
    FlatField,
    Part,
    setting,
    format_validation,
    load_config,
    read_yaml,
    role_of,
)
from drmix.config.train import (
    TRACKERS,
    CollectionSpec,
    ContrastiveConfig,
    DataConfig,
    EvalConfig,
    FineTuningParts,
    MixtureConfig,
    ModelConfig,
    OptimConfig,
    PipelineRun,
    RecipeConfig,
    RunConfig,
    TestConfig,
    TrainConfig,
    options_setting,
)

__all__ = ["HYPERPARAMETER", "INPUT", "OPERATIONAL", "TRACKERS", "CollectionSpec", "Config", "ContrastiveConfig",
           "DataConfig", "EvalConfig", "FineTuningParts", "FlatField", "MixtureConfig", "ModelConfig", "OptimConfig", "Part",
           "PipelineRun", "RecipeConfig", "RunConfig", "TestConfig", "TrainConfig", "options_setting", "setting", "format_validation", "load_config", "read_yaml",
           "role_of"]
