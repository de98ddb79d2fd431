"""What the loop measures between two log records: losses (overall and per collection), examples drawn per
collection, time and throughput. Losses stay on the device until a log record reads them (no host sync between
logging steps).

Every loss of a record is a mean over the window (the optimiser steps since the previous record): ``loss`` and
``raw_loss`` average the steps' losses, ``collection_losses`` the examples' losses of each collection -- as
transformers' ``Trainer`` logs the mean of the losses since its last log. With one collection per batch, the
last step's loss alone would show the loss of whichever collection that batch came from.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch


class CollectionLosses:
    """Running sum and count of per-example losses per collection, read (and reset) every logging step."""

    def __init__(self, names: Sequence[str], device: Any) -> None:
        self.names = list(names)
        self.sums = torch.zeros(len(self.names), dtype=torch.float64, device=device)
        self.counts = torch.zeros(len(self.names), dtype=torch.float64, device=device)

    def add(self, losses: torch.Tensor, collection_ids: Any) -> None:
        ids = torch.as_tensor(collection_ids, device=self.sums.device, dtype=torch.long)
        values = losses.detach().to(torch.float64).reshape(-1)
        if values.numel() != ids.numel():  # a loss that is not per example (e.g. already reduced)
            return
        self.sums.index_add_(0, ids, values)
        self.counts.index_add_(0, ids, torch.ones_like(values))

    def read(self, reduce: Any = None) -> dict[str, float | None]:
        """``{collection: mean loss}`` since the last read (None where no example was drawn); resets.
        ``reduce(tensor)`` sums across processes."""
        both = torch.stack([self.sums, self.counts])
        if reduce is not None:
            both = reduce(both)
        sums, counts = both.cpu().tolist()
        self.sums.zero_()
        self.counts.zero_()
        return {n: (s / c if c else None) for n, s, c in zip(self.names, sums, counts)}


class StepWindow:
    """The measurements of the optimiser steps since the last log record."""

    def __init__(self, names: Sequence[str], device: Any) -> None:
        self.names = list(names)
        self.collection_losses = CollectionLosses(self.names, device)
        self.counts = np.zeros(len(self.names), dtype=np.int64)
        self.seconds = 0.0
        self.samples = 0
        self.step_loss: Any = 0.0   # device tensors after the first micro-step
        self.step_raw: Any = 0.0
        self.loss_sum: Any = 0.0    # sums over the window's finite steps (device tensors after the first step)
        self.raw_sum: Any = 0.0
        self.steps: Any = 0         # how many steps the sums hold (a device tensor after the first step)
        self.last_loss: float | None = None
        self._started = time.perf_counter()

    def start_step(self) -> None:
        self._started = time.perf_counter()
        self.step_loss, self.step_raw = 0.0, 0.0

    def count(self, collection_ids: Any) -> None:
        """The examples of one global micro-batch, by collection."""
        self.counts += np.bincount(collection_ids, minlength=len(self.names))

    def add(self, loss: torch.Tensor, losses: torch.Tensor, collection_ids: Any, accumulation: int) -> None:
        """One micro-batch of this process: the strategy's scalar and the per-example losses."""
        self.step_loss = self.step_loss + loss.detach().float() / accumulation
        self.step_raw = self.step_raw + losses.detach().float().mean() / accumulation
        self.collection_losses.add(losses, collection_ids)

    def end_step(self, samples: int) -> None:
        self.samples += samples
        # a step the non-finite guard skipped stays out of the means (its count is in the record's skip fields)
        loss, raw = torch.as_tensor(self.step_loss), torch.as_tensor(self.step_raw)
        finite = torch.isfinite(loss) & torch.isfinite(raw)
        self.loss_sum = self.loss_sum + torch.where(finite, loss, torch.zeros_like(loss))
        self.raw_sum = self.raw_sum + torch.where(finite, raw, torch.zeros_like(raw))
        self.steps = self.steps + finite.to(loss.dtype)

    def time(self, fn: Callable[[], Any]) -> float:
        """Close the step's training time, run ``fn`` (the strategy's update); its seconds."""
        t = time.perf_counter()
        fn()
        self.seconds += t - self._started
        return time.perf_counter() - t

    def read(self, mean_across: Callable[[float], float], sum_across: Callable[[torch.Tensor], torch.Tensor], *,
             lr: float, strategy_seconds: float) -> dict[str, Any]:
        """The log record's measurements (a collective when several processes train); resets the window."""
        steps = float(self.steps)
        self.last_loss = mean_across(float(self.loss_sum) / steps if steps else float("nan"))
        raw = mean_across(float(self.raw_sum) / steps if steps else float("nan"))
        record = {"loss": self.last_loss, "raw_loss": raw, "lr": lr,
                  "samples_per_s": self.samples / max(self.seconds, 1e-9), "train_seconds": self.seconds,
                  "strategy_seconds": strategy_seconds,
                  "collection_counts": dict(zip(self.names, self.counts.tolist())),
                  "collection_losses": self.collection_losses.read(sum_across)}
        self.seconds, self.samples = 0.0, 0
        self.loss_sum, self.raw_sum, self.steps = 0.0, 0.0, 0
        self.counts[:] = 0
        return record
