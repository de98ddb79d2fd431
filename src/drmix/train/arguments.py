"""The Python API's arguments, checked before anything loads: :class:`~drmix.train.trainer.Trainer` and
:func:`drmix.api.train` take objects (a config, a model, callbacks, listeners, a strategy, an objective); one of
the wrong type is an :class:`~drmix.errors.ArgumentError` naming the argument, what it got and the fix, as the
CLI's errors do, never an ``AttributeError`` from inside the loop after checkpoints were written.

What a user of sentence-transformers would expect is accepted as such: a config as a mapping of fields
(validated into a :class:`~drmix.config.TrainConfig`) or the path of a YAML config file, ``model=`` a folder or
Hub id (the config's ``model``, loaded as the CLI loads ``--model``), one callback or listener without a list.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.errors import wrong_argument
from drmix.listener import Listener


def train_config(config: Any, where: str) -> TrainConfig:
    """``config`` as a :class:`TrainConfig`: a mapping of fields (flat names or by part) is validated into one
    (a wrong value is a :class:`~drmix.errors.ConfigError` naming the field), a path is read as a YAML config."""
    from drmix.config import load_config

    if isinstance(config, TrainConfig):
        return config
    if isinstance(config, Mapping):
        return load_config(TrainConfig, overrides={str(k): v for k, v in config.items()})
    if isinstance(config, (str, os.PathLike)):
        return load_config(TrainConfig, Path(config))
    raise wrong_argument(where, "config", config, "a TrainConfig, a mapping of its fields or a YAML config file's path",
                        fix="pass drmix.TrainConfig(data=[...], output_dir=...) (fields as the CLI's options).")


def model_argument(config: TrainConfig, model: Any, where: str) -> tuple[TrainConfig, Any]:
    """``(config, model object or None)``: a folder or Hub id becomes the config's ``model`` (loaded as
    ``--model`` is, with the config's dtype, LoRA and pooling options); an object must be a SentenceTransformer."""
    if model is None:
        return config, None
    if isinstance(model, (str, os.PathLike)):
        return config.replace(model=str(model)), None
    from sentence_transformers import SentenceTransformer

    if isinstance(model, SentenceTransformer):
        return config, model
    raise wrong_argument(where, "model", model, "a SentenceTransformer, a model folder or a Hub id",
                        fix="pass SentenceTransformer(PATH), or the path itself (model=PATH); a transformers model "
                            "goes in through its saved folder.")


def as_list(value: Any, single: Any) -> list[Any]:
    """``value`` as a list: one item (``single(value)``) or an iterable of them (a string is one item)."""
    if value is None:
        return []
    if single(value) or isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def _is_callback(value: Any) -> bool:
    from transformers import TrainerCallback

    return isinstance(value, TrainerCallback) or (callable(value) and not isinstance(value, type))


def callback_list(callbacks: Any, where: str) -> list[Any]:
    """Plain callables (called with the step's context) and ``transformers.TrainerCallback`` instances."""
    out = as_list(callbacks, _is_callback)
    for i, cb in enumerate(out):
        if not _is_callback(cb):
            raise wrong_argument(where, f"callbacks[{i}]", cb, "a callable or a transformers.TrainerCallback instance",
                                fix="pass functions of the step context (def cb(ctx): ...) or TrainerCallback "
                                    "objects (an instance, MyCallback(), not the class).")
    return out


def listener_list(listeners: Any, where: str) -> list[Listener]:
    out = as_list(listeners, lambda v: isinstance(v, Listener))
    for i, lst in enumerate(out):
        if not isinstance(lst, Listener):
            raise wrong_argument(where, f"listeners[{i}]", lst, "a drmix.listener.Listener instance",
                                fix="subclass drmix.listener.Listener; a plain function goes to callbacks=.")
    return out


def check_parts(where: str, *, strategy: Any = None, objective: Any = None, collections: Any = None) -> None:
    """``strategy`` a :class:`~drmix.mixture.base.Strategy`, ``objective`` an
    :class:`~drmix.train.objective.Objective`, ``collections`` a list of :class:`~drmix.data.collections.Collection`."""
    from drmix.data.collections import Collection
    from drmix.mixture.base import Strategy
    from drmix.train.objective import Objective

    if strategy is not None and not isinstance(strategy, Strategy):
        raise wrong_argument(where, "strategy", strategy, "a drmix.mixture.base.Strategy instance",
                            fix="name a registered strategy in the config (TrainConfig(strategy='groupdro')) or pass "
                                "an instance of a Strategy subclass.")
    if objective is not None and not isinstance(objective, Objective):
        raise wrong_argument(where, "objective", objective, "a drmix.train.objective.Objective instance",
                            fix="name a registered loss in the config (TrainConfig(loss='mnrl')), or pass a "
                                "sentence-transformers loss as loss=.")
    if collections is None:
        return
    if not isinstance(collections, (list, tuple)):
        raise wrong_argument(where, "collections", collections, "a list of drmix Collection objects",
                            fix="pass drmix.load_collections([...]), or train_dataset= to drmix.train.")
    for i, c in enumerate(collections):
        if not isinstance(c, Collection):
            raise wrong_argument(where, f"collections[{i}]", c, "a drmix Collection",
                                fix="load them with drmix.load_collections([...]); paths go to the config's data.")
