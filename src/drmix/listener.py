"""The trainer's listener interface: the hooks of what watches a training run without being part of the loop.

It sits below every package so that the listeners of each (evaluation during training in
:mod:`drmix.evaluation.periodic`, the run report in :mod:`drmix.report.listener`, trackers and callbacks in
:mod:`drmix.train.listeners`) subclass it without importing the trainer; :mod:`drmix.train.listeners` describes
when the trainer calls each hook.
"""
from __future__ import annotations

from typing import Any


class Listener:
    """Base class: every hook does nothing."""

    #: whether ``on_step_end`` may ask to stop (then every process agrees on it, a collective per step)
    can_stop = False

    def on_start(self, trainer: Any) -> None:
        pass

    def on_record(self, record: dict[str, Any]) -> None:
        pass

    def on_step_end(self, trainer: Any, ctx: Any) -> bool:
        return False

    def on_save(self, trainer: Any) -> None:
        pass

    def on_train_end(self, trainer: Any) -> None:
        pass

    def on_finish(self, trainer: Any, model: Any, weights: dict | None) -> None:
        pass

    def close(self) -> None:
        pass
