"""The estimate and the progress lines of a recipe's stages, once for every recipe.

A stage declares its work (:class:`StageWork`: training examples, passages encoded and by which encoder, LLM
calls); the estimate is that work at a throughput (:mod:`drmix.recipes.throughput`: measured on this machine
with the run's model and lengths, or assumed where it cannot be, and said which), and :class:`Progress` prints
one line per stage: its place, what it does, its estimated time, then its measured time.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from drmix.recipes.throughput import ASSUMED_RATES, MODEL, Rates, assumed

__all__ = ["ASSUMED_RATES", "Progress", "StageWork", "estimate_device", "estimate_rows", "minutes",
           "training_work"]

log = logging.getLogger(__name__)


@dataclass
class StageWork:
    """What a stage does, in the units the estimate counts."""

    name: str
    examples: float = 0.0          # training examples (a COCO span pair counts as one)
    passages: float = 0.0          # texts encoded without gradients (mining, filtering, evaluation)
    llm_calls: int = 0
    unsharded: float = 0.0         # of the passages: those every rank of a torchrun launch encodes whole
    encoder: str = MODEL           # which encoder's rate the passages go at (a recipe's "teacher", or the model)

    def seconds(self, rates: tuple[float, float]) -> float:
        return self.examples / rates[0] + self.passages / rates[1]


def training_examples(steps: int, batch_size: int, negatives: int = 0) -> float:
    """The examples a training run of ``steps`` x ``batch_size`` counts, a hard negative as half an example."""
    return steps * batch_size * (1 + negatives / 2)


def training_work(name: str, config: Any) -> StageWork:
    """A training stage's work (:func:`training_examples`; ``config`` a TrainConfig or a COCO config)."""
    negatives = getattr(config.contrastive, "num_negatives", 0) or 0
    return StageWork(name, examples=training_examples(config.optim.max_steps, config.contrastive.batch_size,
                                                      negatives))


def estimate_device(device: str | None) -> str:
    """The device the estimate is for: ``--device``, else cuda when a GPU is here."""
    if device:
        return "cuda" if str(device).startswith("cuda") else "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def estimate_rows(work: Sequence[StageWork], rates: Rates | str) -> list[str]:
    """Markdown: the rates (``rates``, or a device whose :data:`ASSUMED_RATES` are assumed), each said measured
    or assumed, then every stage's work and estimated minutes, and the total."""
    if isinstance(rates, str):
        rates = assumed(rates)
    lines = [f"Estimated time on {rates.device}, at these rates:", "", *rates.lines(), "",
             "| stage | training examples | passages encoded | minutes |", "|---|---:|---:|---:|"]
    total = 0.0
    for w in work:
        sec = rates.seconds(w)
        total += sec
        lines.append(f"| {w.name} | {w.examples:,.0f} | {w.passages:,.0f} | {sec / 60:.1f} |")
    lines.append(f"| total | {sum(w.examples for w in work):,.0f} | {sum(w.passages for w in work):,.0f} | "
                 f"{total / 60:.1f} |")
    return lines


class Progress:
    """One line per stage: its place, what it does, its estimated time; then its measured time. The rates of the
    estimate start at :data:`ASSUMED_RATES` and become the run's own after its first measured stages. ``recipe``
    begins every line."""

    def __init__(self, work: list[StageWork], device: str, emit: Callable[[str], None] | None = None,
                 recipe: str = "adapt") -> None:
        self.work = {w.name: w for w in work}
        self.order = [w.name for w in work]
        self.rates = list(ASSUMED_RATES[device])
        self.measured = [False, False]
        self.emit = emit or log.info
        self.recipe = recipe

    def start(self, name: str, what: str = "") -> float:
        w = self.work.get(name, StageWork(name))
        i = self.order.index(name) + 1 if name in self.order else 0
        eta = w.seconds((self.rates[0], self.rates[1]))
        basis = "rates measured in this run" if (self.measured[0] or not w.examples) and (
            self.measured[1] or not w.passages) else "assumed rates"
        estimated = f" -- estimated {minutes(eta)} (at {basis})" if w.examples or w.passages else ""
        self.emit(f"{self.recipe} [{i}/{len(self.order)}] {name}{(': ' + what) if what else ''}{estimated}")
        return time.perf_counter()

    def reused(self, name: str) -> None:
        i = self.order.index(name) + 1 if name in self.order else 0
        self.emit(f"{self.recipe} [{i}/{len(self.order)}] {name}: reused (made earlier with the same settings)")

    def finish(self, name: str, t0: float) -> None:
        seconds = time.perf_counter() - t0
        w = self.work.get(name)
        if w is not None and seconds > 1:
            if w.examples and not w.passages:
                self.rates[0], self.measured[0] = w.examples / seconds, True
            elif w.passages and not w.examples:
                self.rates[1], self.measured[1] = w.passages / seconds, True
        self.emit(f"{self.recipe}: {name} done in {minutes(seconds)}")


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
