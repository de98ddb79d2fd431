"""drmix's Python entry point for training: :func:`train` runs the :class:`~drmix.train.trainer.Trainer` with the
listeners a run normally has -- evaluation during training when ``eval_data`` or evaluators are set
(:class:`~drmix.evaluation.periodic.PeriodicEvaluation`) and, at the end, the model card and ``report.html``
(:class:`~drmix.report.listener.RunReport`). It takes objects where ``SentenceTransformerTrainer`` does: a
``SentenceTransformer`` (``model=``), ``datasets`` objects (``train_dataset=``: :mod:`drmix.data.in_memory`),
sentence-transformers evaluators (``evaluator=``) and a sentence-transformers loss (``loss=``:
:mod:`drmix.train.st_losses`). It sits above ``train/``, ``evaluation/`` and ``report/`` so that the loop imports
neither."""
from __future__ import annotations

from collections.abc import Callable, Sequence
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


def train(config: TrainConfig, *, strategy: Any = None, objective: Any = None,
          callbacks: Sequence[Callable[..., None]] = (), listeners: Sequence[Listener] = (),
          model: Any = None, train_dataset: Any = None, evaluator: Any = None, loss: Any = None,
          report: bool = True, **kwargs: Any) -> TrainResult:
    """Train a model as ``config`` says (see :class:`~drmix.train.trainer.Trainer`).

    Args:
        model: a loaded ``SentenceTransformer`` to train (instead of ``config.model``).
        train_dataset: a ``datasets.Dataset``, ``DatasetDict`` or ``{name: Dataset}`` in any row layout drmix
            reads -- one training collection per dataset (instead of ``config.data``).
        evaluator: a sentence-transformers evaluator (e.g. ``InformationRetrievalEvaluator``) or a list of them,
            run every ``eval_every`` steps and at the end; scores in ``metrics.jsonl``, the report and the card.
        loss: a sentence-transformers loss module (``MultipleNegativesRankingLoss(model)``, ...) or the name of
            a registered loss (``"mnrl"``), instead of ``config.contrastive.loss``.
        listeners: added after the default ones; ``callbacks`` (callables or ``transformers.TrainerCallback``
            objects) after those.
        report: write the model card and ``report.html`` at the end (a recipe's many short runs skip them).
    """
    from drmix.train.trainer import Trainer

    if isinstance(loss, str):
        config = config.replace(loss=loss)
    elif loss is not None:
        if objective is not None:
            from drmix.errors import ConfigError

            raise ConfigError("both loss= and objective= were given.", fix="pass one of them.")
        from drmix.train.st_losses import objective_from_loss

        objective = objective_from_loss(loss, config, strategy)
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
    evaluators = [] if evaluator is None else list(evaluator) if isinstance(evaluator, (list, tuple)) else [evaluator]
    return Trainer(config, strategy=strategy, objective=objective, callbacks=callbacks,
                   listeners=[*default_listeners(config, evaluators, report=report), *listeners], **kwargs).train()
