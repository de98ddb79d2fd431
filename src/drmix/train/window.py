"""What the loop measures between two log records: losses (overall and per collection), examples drawn per
collection, time and throughput. Losses stay on the device until a log record reads them (no host sync between
logging steps).

Every loss of a record is a mean over the window (the optimiser steps since the previous record): ``loss`` and
``raw_loss`` average the steps' losses, ``collection_losses`` the examples' losses of each collection -- as
transformers' ``Trainer`` logs the mean of the losses since its last log. With one collection per batch, the
last step's loss alone would show the loss of whichever collection that batch came from.

A checkpoint saved between two log records keeps the open window (:meth:`StepWindow.state_dict`), so a run
resumed from it logs the record the uninterrupted run logs: the same means over the same steps (the losses bit
for bit on one process), not the mean of the steps since the resume.
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

    def state_dict(self, sum_across: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   world_size: int = 1) -> dict[str, Any]:
        """The open window, for a checkpoint (a collective when several processes train: every process calls
        it). The loss sums are the processes' mean (each process adds its own steps' losses to them after a
        resume, and a record averages the processes), the per-collection sums their total."""
        device = self.collection_losses.sums.device
        both = torch.stack([self.collection_losses.sums, self.collection_losses.counts])
        scalars = torch.tensor([float(self.loss_sum), float(self.raw_sum), float(self.steps)], dtype=torch.float64,
                               device=device)
        if sum_across is not None and world_size > 1:
            both, scalars = sum_across(both), sum_across(scalars) / world_size
        loss_sum, raw_sum, steps = scalars.cpu().tolist()
        sums, counts = both.cpu().tolist()
        return {"loss_sum": loss_sum, "raw_sum": raw_sum, "steps": steps, "collection_loss_sums": sums,
                "collection_loss_counts": counts, "counts": self.counts.tolist(), "samples": self.samples,
                "seconds": self.seconds, "last_loss": self.last_loss}

    def load_state_dict(self, state: dict[str, Any] | None, *, main: bool = True) -> None:
        """Reopen a checkpoint's window (nothing for a checkpoint written before windows were kept). The
        per-collection totals go to the main process only (a record sums them over the processes)."""
        if not state:
            return
        device = self.collection_losses.sums.device
        if state["steps"] or state["loss_sum"] or state["raw_sum"]:  # float32 values kept exactly in JSON
            self.loss_sum, self.raw_sum, self.steps = (torch.tensor(state[k], dtype=torch.float32, device=device)
                                                        for k in ("loss_sum", "raw_sum", "steps"))
        if main:
            self.collection_losses.sums = torch.tensor(state["collection_loss_sums"], dtype=torch.float64,
                                                       device=device)
            self.collection_losses.counts = torch.tensor(state["collection_loss_counts"], dtype=torch.float64,
                                                         device=device)
        self.counts[:] = state["counts"]
        self.samples, self.seconds, self.last_loss = state["samples"], state["seconds"], state.get("last_loss")

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
