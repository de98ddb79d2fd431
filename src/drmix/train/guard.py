"""The non-finite guard: a NaN or infinite loss or gradient never reaches the weights.

Per optimiser step the trainer tells the guard each micro-step's loss (:meth:`NonFiniteGuard.observe_loss`)
and, before ``optimizer.step()``, the total gradient norm (:meth:`NonFiniteGuard.before_step`). The guard
computes on the device whether the step is finite and hands the flag to the optimiser the way
``torch.amp.GradScaler`` does: fused Adam/AdamW kernels read ``optimizer.found_inf`` (a float tensor,
1 = skip) and then leave the parameters, the moments and the step count untouched. So a skipped step
costs no host synchronisation. The trainer zeroes the gradients after every step as usual.

Counters (steps skipped in total, the current run of consecutive skips and the longest run since the
last check) live on the device as well; the trainer reads them only where it already synchronises (when
it writes a metrics record and at the end: :meth:`NonFiniteGuard.sync`). When a run of
``max_consecutive`` skipped steps is seen there, training stops with a :class:`NonFiniteError`.

Two cases cannot use the flag and are handled differently:

* an optimiser without fused ``found_inf`` support (foreach / single-tensor Adam, other optimisers):
  the flag is read on the host (one synchronisation per step) and ``step()`` is not called;
* fp16 with a ``GradScaler`` (``mixed_precision: fp16``): the scaler sets and removes ``found_inf`` itself
  and skips steps with non-finite gradients; the guard still counts the steps whose loss or norm was
  not finite.

Hand-written: torch's GradScaler does this only for fp16 loss scaling, and accelerate exposes only its
result (``step_was_skipped``), which is a host read.
"""
from __future__ import annotations

from typing import Any

import torch

from drmix.device import all_reduce
from drmix.errors import DrmixError


class NonFiniteError(DrmixError):
    """Training produced non-finite losses or gradients for too many consecutive steps."""


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimiser under accelerate's wrapper."""
    return getattr(optimizer, "optimizer", optimizer)


def supports_found_inf(optimizer: Any) -> bool:
    """Whether ``optimizer.step()`` honours a ``found_inf`` tensor (fused Adam/AdamW/SGD/Adagrad)."""
    opt = _inner(optimizer)
    return bool(getattr(opt, "_step_supports_amp_scaling", False)) and all(
        g.get("fused") for g in opt.param_groups)


class NonFiniteGuard:
    """Skips optimiser steps whose loss or total gradient norm is not finite (see the module docstring)."""

    def __init__(self, device: torch.device | str, *, max_consecutive: int = 20, world_size: int = 1) -> None:
        self.device = torch.device(device)
        self.max_consecutive = max_consecutive
        self.world_size = world_size
        self._bad = torch.zeros((), dtype=torch.bool, device=self.device)
        # skipped in total, current consecutive run, longest run since the last sync
        self._counts = torch.zeros(3, dtype=torch.int64, device=self.device)
        self._restored_total = 0

    # -- per micro-step / step (no host reads) ------------------------------------------------------------
    def observe_loss(self, loss: torch.Tensor) -> None:
        """Note one micro-step's (scalar) loss; call before or after its backward."""
        self._bad = self._bad | ~torch.isfinite(loss.detach()).all()

    def before_step(self, optimizer: Any, grad_norm: torch.Tensor | float | None, *, scaler: Any = None) -> bool:
        """Set the skip flag for this step; returns whether the caller should call ``optimizer.step()``.

        ``grad_norm`` is the total gradient norm (what ``clip_grad_norm_`` returns), or None to compute it.
        """
        opt = _inner(optimizer)
        if grad_norm is None:
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            grad_norm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=self.device)
        norm = torch.as_tensor(grad_norm, device=self.device)
        bad = self._bad | ~torch.isfinite(norm)
        if self.world_size > 1:
            bad = all_reduce(bad.to(torch.int32), "max").bool()  # every rank skips alike
        self._bad = torch.zeros_like(self._bad)
        inc = bad.to(torch.int64)
        run = (self._counts[1] + inc) * inc
        self._counts = torch.stack([self._counts[0] + inc, run, torch.maximum(self._counts[2], run)])
        if scaler is not None:  # the GradScaler owns found_inf (and skips non-finite gradients itself)
            return True
        if supports_found_inf(opt):
            opt.found_inf = bad.to(torch.float32)
            return True
        return not bool(bad.item())  # fallback: one host read per step

    # -- at the trainer's existing sync points ------------------------------------------------------------
    def sync(self) -> dict[str, int]:
        """Read the counters (one host read), raise after too many consecutive skips; fields for metrics."""
        total, run, longest = (int(v) for v in self._counts.tolist())
        self._counts[2] = 0
        if longest >= self.max_consecutive:
            raise NonFiniteError(
                f"the loss or gradient norm was not finite for {longest} consecutive steps "
                f"({total + self._restored_total} skipped in all); the weights hold the last finite step.",
                fix="lower --learning-rate, check the data for empty texts, or raise max_nonfinite_steps.")
        return {"skipped_steps": total + self._restored_total, "consecutive_skipped": run}

    def state_dict(self) -> dict[str, int]:
        total, run, _ = (int(v) for v in self._counts.tolist())
        return {"skipped_steps": total + self._restored_total, "consecutive_skipped": run}

    def load_state_dict(self, state: dict[str, int] | None) -> None:
        state = state or {}
        self._restored_total = int(state.get("skipped_steps", 0))
        run = int(state.get("consecutive_skipped", 0))
        self._counts = torch.tensor([0, run, run], dtype=torch.int64, device=self.device)

