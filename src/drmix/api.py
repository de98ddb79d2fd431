"""drmix's Python entry point for training: :func:`train` runs the :class:`~drmix.train.trainer.Trainer` with the
listeners a run normally has -- evaluation during training when ``eval_data`` is set
(:class:`~drmix.train.evaluation.PeriodicEvaluation`) and, at the end, the model card and ``report.html``
(:class:`~drmix.report.listener.RunReport`). It sits above ``train/``, ``evaluation/`` and ``report/`` so that
the loop imports neither."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drmix.config import TrainConfig
from drmix.train.listeners import Listener
from drmix.train.saving import TrainResult


def default_listeners(config: TrainConfig) -> list[Listener]:
    """Evaluation during training (when ``eval_data`` is set), then the card and report."""
    from drmix.report.listener import RunReport

    out: list[Listener] = []
    if config.eval.eval_data:
        from drmix.train.evaluation import PeriodicEvaluation

        out.append(PeriodicEvaluation(config))
    out.append(RunReport())
    return out


def train(config: TrainConfig, *, strategy: Any = None, objective: Any = None,
          callbacks: Sequence[Callable[..., None]] = (), listeners: Sequence[Listener] = (),
          **kwargs: Any) -> TrainResult:
    """Train a model as ``config`` says (see :class:`~drmix.train.trainer.Trainer`); ``listeners`` are added
    after the default ones, ``callbacks`` (callables or ``transformers.TrainerCallback`` objects) after those."""
    from drmix.train.trainer import Trainer

    return Trainer(config, strategy=strategy, objective=objective, callbacks=callbacks,
                   listeners=[*default_listeners(config), *listeners], **kwargs).train()
