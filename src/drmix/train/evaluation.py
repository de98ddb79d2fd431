"""Evaluation during training as a trainer listener: the ``eval_data`` BEIR directories every ``eval_every``
steps and at the end (:class:`~drmix.evaluation.evaluate.DevEvaluator`), on the main process; the scores go to
``metrics.jsonl`` as ``{"step": N, "eval": {...}}`` records."""
from __future__ import annotations

import logging
from typing import Any

from drmix.evaluation.evaluate import DevEvaluator
from drmix.train.listeners import Listener

log = logging.getLogger(__name__)


class PeriodicEvaluation(Listener):
    """Evaluates the model every ``eval_every`` steps (0: only at the end) and once more at the end unless the
    last step was just evaluated."""

    def __init__(self, config: Any) -> None:
        e = config.eval
        self.every = e.eval_every
        self.evaluator = DevEvaluator(e.eval_data, split=e.eval_split, max_queries=e.eval_max_queries,
                                      seed=config.optim.seed, query_instructions=e.query_instructions)

    def on_step_end(self, trainer: Any, ctx: Any) -> bool:
        if self.every and trainer.step % self.every == 0:
            self.evaluate(trainer)
        return False

    def on_train_end(self, trainer: Any) -> None:
        if not self.every or trainer.config.optim.max_steps % self.every:
            self.evaluate(trainer)

    def evaluate(self, trainer: Any) -> None:
        if trainer.is_main:
            scores = self.evaluator(trainer.model)
            trainer.metrics.append({"step": trainer.step, "eval": scores})
            log.info("step %d eval: %s", trainer.step, scores)
        trainer.barrier()
