"""Listeners: what watches a training run without being part of the loop (the hooks: :class:`drmix.listener.Listener`).

The trainer calls every listener at fixed points, in the order they were given:

* ``on_start(trainer)`` -- the output folder is prepared and a checkpoint (if any) restored;
* ``on_record(record)`` -- every record written to ``metrics.jsonl`` or ``weights.jsonl``;
* ``on_step_end(trainer, ctx)`` -- after each optimiser step and its log record; return True to stop training
  (agreed on by every process when a listener has ``can_stop``);
* ``on_save(trainer)`` -- after a checkpoint;
* ``on_train_end(trainer)`` -- after the last step, before the final model is saved;
* ``on_finish(trainer, model, weights)`` -- after the final model and ``weights.json`` are saved;
* ``close()`` -- always, also when training stops with an error.

Evaluation during training (:class:`drmix.evaluation.periodic.PeriodicEvaluation`) and the model card with
``report.html`` (:class:`drmix.report.listener.RunReport`) are listeners, given by :func:`drmix.api.train`; so are
trackers (``report_to``), ``transformers.TrainerCallback`` objects and plain callables, built here. This is the
role of ``callbacks`` in sentence-transformers' and transformers' trainers, and of ``evaluator=``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from drmix.listener import Listener
from drmix.train.tracking import HFCallbacks, Tracking, split_callbacks

log = logging.getLogger(__name__)


class CallableListener(Listener):
    """A plain callable called with the :class:`~drmix.mixture.base.StepContext` after every step."""

    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn = fn

    def on_step_end(self, trainer: Any, ctx: Any) -> bool:
        self.fn(ctx)
        return False


class TrackerListener(Listener):
    """The ``report_to`` trackers (TensorBoard, W&B) of the main process (:mod:`drmix.train.tracking`)."""

    def __init__(self, report_to: Sequence[str]) -> None:
        self.report_to = list(report_to)
        self.tracking = Tracking()

    def on_start(self, trainer: Any) -> None:
        if trainer.is_main:
            self.tracking = Tracking.from_config(self.report_to, trainer.out, start_step=trainer.step,
                                                 config=trainer.config.model_dump(mode="json"))

    def on_record(self, record: dict[str, Any]) -> None:
        self.tracking.record(record)

    def close(self) -> None:
        self.tracking.close()


class HFCallbackListener(Listener):
    """``transformers.TrainerCallback`` objects (:class:`~drmix.train.tracking.HFCallbacks`), main process."""

    can_stop = True

    def __init__(self, callbacks: HFCallbacks, *, enabled: bool) -> None:
        self.hf = callbacks
        self.enabled = enabled

    def on_start(self, trainer: Any) -> None:
        if self.enabled:
            self.hf.sync_steps(trainer.config)
            self.hf.train_begin(trainer.step, trainer.model)

    def on_record(self, record: dict[str, Any]) -> None:
        if self.enabled and ("loss" in record or "eval" in record):
            self.hf.logged(record)

    def on_step_end(self, trainer: Any, ctx: Any) -> bool:
        return bool(self.enabled and self.hf.step_end(trainer.step, trainer.model))

    def on_save(self, trainer: Any) -> None:
        if self.enabled:
            self.hf.saved()

    def on_finish(self, trainer: Any, model: Any, weights: dict | None) -> None:
        if self.enabled:
            self.hf.train_end(model)


def callback_listeners(callbacks: Sequence[Any], config: Any) -> tuple[list[Listener], Callable[[bool], None]]:
    """Listeners for ``callbacks`` (plain callables first, then ``TrainerCallback`` objects), and a function
    that tells the HF adapter whether this is the main process once the accelerator is up. Built before the
    ``Accelerator``: ``TrainingArguments`` resets accelerate's process state."""
    plain, hf = split_callbacks(callbacks)
    out: list[Listener] = [CallableListener(fn) for fn in plain]
    adapter = HFCallbackListener(HFCallbacks(hf, config), enabled=False) if hf else None
    if adapter is not None:
        out.append(adapter)

    def set_main(is_main: bool) -> None:
        if adapter is not None:
            adapter.enabled = is_main

    return out, set_main
