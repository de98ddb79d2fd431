"""drmix's Python entry point for training: :func:`train` runs the :class:`~drmix.train.trainer.Trainer` with the
listeners a run normally has -- evaluation during training when ``eval_data`` or evaluators are set
(:class:`~drmix.evaluation.periodic.PeriodicEvaluation`) and, at the end, the model card and ``report.html``
(:class:`~drmix.report.listener.RunReport`). It takes objects where ``SentenceTransformerTrainer`` does: a
``SentenceTransformer`` (``model=``), ``datasets`` objects (``train_dataset=``: :mod:`drmix.data.in_memory`),
sentence-transformers evaluators (``evaluator=``) and a sentence-transformers loss (``loss=``:
:mod:`drmix.train.st_losses`). It sits above ``train/``, ``evaluation/`` and ``report/`` so that the loop imports
neither."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.train.listeners import Listener
from drmix.train.saving import TrainResult


def default_listeners(config: TrainConfig, evaluators: Sequence[Any] = (), *, report: bool = True) -> list[Listener]:
    """Evaluation during training (when ``eval_data``, ``evaluator`` or ``evaluators`` are set), then (``report``)
    the card and report."""
    from drmix.report.listener import RunReport

    out: list[Listener] = []
    named = list(config.eval.evaluator)
    if config.eval.eval_data or named or evaluators:
        from drmix.evaluation.periodic import PeriodicEvaluation, build_evaluator

        out.append(PeriodicEvaluation(config, [*map(build_evaluator, named), *evaluators]))
    if report:
        out.append(RunReport())
    return out


def _model_record(config: TrainConfig, model: Any) -> TrainConfig:
    """``config`` naming the folder a given model was loaded from (config.yaml and the card record it), when the
    config names none and the model knows a local folder."""
    if model is None or config.model.name_or_path is not None:
        return config
    try:
        path = model[0].auto_model.config._name_or_path
    except (AttributeError, IndexError, KeyError, TypeError):
        return config
    return config.replace(model=str(path)) if path and Path(str(path)).is_dir() else config


def _evaluators(config: TrainConfig, evaluator: Any) -> tuple[TrainConfig, list[Any]]:
    """``evaluator=``: objects (sentence-transformers evaluators: callables), and names as ``--evaluator`` takes
    them (``"nanobeir"``, ``"nanobeir:nfcorpus"``), which go to the config's ``evaluator`` and are checked with it."""
    from drmix.errors import wrong_argument
    from drmix.train.arguments import as_list

    names, objects = [], []
    for i, e in enumerate(as_list(evaluator, lambda v: isinstance(v, str) or callable(v))):
        if isinstance(e, str):
            names.append(e)
        elif callable(e) and not isinstance(e, type):
            objects.append(e)
        else:
            raise wrong_argument("drmix.train", "evaluator" if evaluator is e else f"evaluator[{i}]", e,
                                "a sentence-transformers evaluator instance or an evaluator name ('nanobeir')",
                                fix="pass InformationRetrievalEvaluator(...) (an instance, not the class), a list of "
                                    "them, or 'nanobeir[:NAME,NAME]'; BEIR folders go to the config's eval_data.")
    return (config.replace(evaluator=[*config.eval.evaluator, *names]) if names else config), objects


def _loss_objective(config: TrainConfig, loss: Any, objective: Any, strategy: Any) -> tuple[TrainConfig, Any]:
    """``loss=``: a registered loss's name (the config's ``loss``) or a sentence-transformers loss module."""
    import torch

    from drmix.errors import ConfigError, wrong_argument

    if loss is None:
        return config, objective
    if isinstance(loss, str):
        return config.replace(loss=loss), objective
    if not isinstance(loss, torch.nn.Module):
        raise wrong_argument("drmix.train", "loss", loss, "a sentence-transformers loss module or a loss name",
                            fix="pass MultipleNegativesRankingLoss(model) or a name such as 'mnrl' or 'infonce'.")
    if objective is not None:
        raise ConfigError("both loss= and objective= were given.", fix="pass one of them.")
    from drmix.train.st_losses import objective_from_loss

    return config, objective_from_loss(loss, config, strategy)


def train(config: TrainConfig | Mapping[str, Any] | str | Path, *, strategy: Any = None, objective: Any = None,
          callbacks: Sequence[Callable[..., None]] = (), listeners: Sequence[Listener] = (),
          model: Any = None, train_dataset: Any = None, evaluator: Any = None, loss: Any = None,
          report: bool = True, **kwargs: Any) -> TrainResult:
    """Train a model as ``config`` says (see :class:`~drmix.train.trainer.Trainer`). Every argument's type is
    checked before anything loads (:mod:`drmix.train.arguments`): a wrong one is an
    :class:`~drmix.errors.ArgumentError` (a ``TypeError`` too) naming it and the fix.

    Args:
        config: a :class:`~drmix.config.TrainConfig`, a mapping of its fields (validated into one) or the path of
            a YAML config file.
        model: a loaded ``SentenceTransformer`` to train, or a model folder / Hub id (instead of ``config.model``).
        train_dataset: a ``datasets.Dataset``, ``DatasetDict`` or ``{name: Dataset}`` in any row layout drmix
            reads -- one training collection per dataset (instead of ``config.data``).
        evaluator: a sentence-transformers evaluator (e.g. ``InformationRetrievalEvaluator``), an evaluator name
            as ``--evaluator`` takes it (``"nanobeir"``) or a list of them, run every ``eval_every`` steps and at
            the end; scores in ``metrics.jsonl``, the report and the card.
        loss: a sentence-transformers loss module (``MultipleNegativesRankingLoss(model)``, ...) or the name of
            a registered loss (``"mnrl"``), instead of ``config.contrastive.loss``.
        listeners: added after the default ones; ``callbacks`` (callables or ``transformers.TrainerCallback``
            objects) after those.
        report: write the model card and ``report.html`` at the end (a recipe's many short runs skip them).
    """
    from drmix.train import arguments as args
    from drmix.train.trainer import Trainer

    config = args.train_config(config, "drmix.train")
    config, model = args.model_argument(config, model, "drmix.train")
    callbacks = args.callback_list(callbacks, "drmix.train")
    listeners = args.listener_list(listeners, "drmix.train")
    args.check_parts("drmix.train", strategy=strategy, objective=objective, collections=kwargs.get("collections"))
    config, evaluators = _evaluators(config, evaluator)
    config, objective = _loss_objective(config, loss, objective, strategy)
    config = _model_record(config, model)
    if train_dataset is not None:
        from drmix.data.formats import reading_scored_pairs
        from drmix.data.in_memory import collections_from_datasets
        from drmix.train.scored_pairs import reads_scored_pairs

        with reading_scored_pairs(reads_scored_pairs(config, objective)):   # sentence1, sentence2, score rows
            kwargs["collections"] = collections_from_datasets(train_dataset, format=config.data.format,
                                                              columns=config.data.columns)
    if model is not None:
        kwargs["model"] = model
    return Trainer(config, strategy=strategy, objective=objective, callbacks=callbacks,
                   listeners=[*default_listeners(config, evaluators, report=report), *listeners], **kwargs).train()
