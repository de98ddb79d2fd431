"""Configuration models (pydantic), made of parts: :mod:`drmix.config.parts` (groups, flat names, roles,
reading YAML) and :mod:`drmix.config.train` (``TrainConfig`` and its parts)."""
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
    MixtureConfig,
    ModelConfig,
    OptimConfig,
    PipelineBaseConfig,
    PipelineRun,
    RunConfig,
    TestConfig,
    TrainConfig,
)

__all__ = ["HYPERPARAMETER", "INPUT", "OPERATIONAL", "TRACKERS", "CollectionSpec", "Config", "ContrastiveConfig",
           "DataConfig", "EvalConfig", "FlatField", "MixtureConfig", "ModelConfig", "OptimConfig", "Part",
           "PipelineBaseConfig", "PipelineRun", "RunConfig", "TestConfig", "TrainConfig", "setting", "format_validation", "load_config", "read_yaml",
           "role_of"]
