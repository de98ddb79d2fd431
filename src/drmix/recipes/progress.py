"""The estimate and the progress lines of a recipe's stages, once for every recipe.

A stage declares its work (:class:`StageWork`: training examples, passages encoded, LLM calls); the estimate is
that work at a throughput, assumed (:data:`ASSUMED_RATES`) until the run has measured its own, and
:class:`Progress` prints one line per stage: its place, what it does, its estimated time, then its measured time.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: assumed throughput before a stage of the run has been measured: (training examples/s, passages encoded/s).
#: cuda: the assumption of benchmarks/_lease.py (one H100, pre-tokenised inputs, all-MiniLM-L6-v2); cpu: measured
#: on two shared cores with a 2-layer MiniLM at 8/24 tokens (docs/adapt.md) -- slower models take longer, and the
#: progress lines switch to the run's own measured rates after the first training and encoding stages.
ASSUMED_RATES = {"cuda": (1000.0, 10000.0), "cpu": (60.0, 150.0)}


@dataclass
class StageWork:
    """What a stage does, in the units the estimate counts."""

    name: str
    examples: float = 0.0          # training examples (a COCO span pair counts as one)
    passages: float = 0.0          # texts encoded without gradients (mining, filtering, evaluation)
    llm_calls: int = 0
    unsharded: float = 0.0         # of the passages: those every rank of a torchrun launch encodes whole

    def seconds(self, rates: tuple[float, float]) -> float:
        return self.examples / rates[0] + self.passages / rates[1]


def training_work(name: str, config: Any) -> StageWork:
    """A training stage's work: steps x batch, a hard negative counted as half an example (``config`` a
    TrainConfig or a COCO config)."""
    negatives = getattr(config.contrastive, "num_negatives", 0) or 0
    return StageWork(name, examples=config.optim.max_steps * config.contrastive.batch_size * (1 + negatives / 2))


def estimate_device(device: str | None) -> str:
    """The device the estimate is for: ``--device``, else cuda when a GPU is here."""
    if device:
        return "cuda" if str(device).startswith("cuda") else "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def estimate_rows(work: Sequence[StageWork], device: str) -> list[str]:
    """Markdown: the rates assumed on ``device``, then every stage's work and estimated minutes, and the total."""
    rates = ASSUMED_RATES[device]
    lines = [f"Estimated time on {device} at {rates[0]:,.0f} training examples/s and {rates[1]:,.0f} passages/s "
             "(assumed; see docs/adapt.md):", "",
             "| stage | training examples | passages encoded | minutes |", "|---|---:|---:|---:|"]
    total = 0.0
    for w in work:
        sec = w.seconds(rates)
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
