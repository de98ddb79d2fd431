"""Mixed precision for training: ``auto`` picks bf16, fp16 (with a loss scaler) or fp32.

The resolution of a requested precision on a device (and inference autocast) lives in :mod:`drmix.device`.

``auto`` (the default) resolves per device: bf16 on a GPU that supports it (Ampere and newer:
``torch.cuda.is_bf16_supported()``), fp16 with a dynamic loss scaler on older GPUs, fp32 on CPU
(CPU autocast to bf16 is slower than fp32 on most CPUs without AMX; asked for there, it runs as asked and a
warning line says so: :func:`drmix.device.cpu_bf16`). TF32 matmuls are switched on
for CUDA (fp32 weights and optimiser, tensor-core matmuls; what PyTorch recommends for training).

Precision is handled here rather than by ``accelerate``'s ``mixed_precision``: accelerate keeps it in
a process-wide singleton (``AcceleratorState``), so a second ``Accelerator`` with another precision in
the same process fails ("AcceleratorState has already been initialized") and resetting the singleton
would silently change the first trainer's precision too. Each :class:`Precision` is independent (its
own ``torch.autocast`` settings and ``GradScaler``), so several trainers with different precision
live in one process (pipeline stages, notebooks); the trainer's ``Accelerator`` always runs with
``mixed_precision="no"``.

Another library's trainer in the same process (sentence-transformers' / transformers' ``Trainer`` at bf16 or
fp16) leaves that singleton at its own precision; :func:`release_foreign_state` clears it before drmix's
``Accelerator`` is built, as ``transformers.TrainingArguments`` itself does before each of its trainers, so the
two trainers alternate in one process (``benchmarks/bench_train.py --rounds 2``).
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from drmix.device import AUTOCAST_DTYPES, enable_tf32, resolve_precision, warn_slow_bf16


class Precision:
    """Autocast and (for fp16) loss scaling of one training run, independent of any other in the process."""

    def __init__(self, requested: str | None, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.name = resolve_precision(requested, self.device)
        warn_slow_bf16(self.name, self.device, "pass --mixed-precision no (not --bf16)")
        enable_tf32(self.device)
        self.dtype = AUTOCAST_DTYPES.get(self.name)
        self.scaler = None
        if self.name == "fp16":
            self.scaler = torch.amp.GradScaler(self.device.type)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, scaled under fp16."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward(**kwargs)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale (before clipping)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; under fp16 skipped when gradients overflowed, and the scale updated."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "scaler": self.scaler.state_dict() if self.scaler is not None else None}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state and self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def release_foreign_state(cpu: bool) -> bool:
    """Clear accelerate's process-wide state when another trainer left it where drmix's
    ``Accelerator(mixed_precision="no", cpu=cpu)`` would be refused: a mixed precision other than ``"no"``, or
    (single process only) a GPU device when ``cpu`` is asked. The process group (``PartialState``) is kept
    unless the device itself must change. Returns whether anything was cleared."""
    from accelerate.state import AcceleratorState, DistributedType, PartialState

    state = AcceleratorState._shared_state
    if not state:
        return False
    wrong_device = bool(cpu) and getattr(state.get("device"), "type", "cpu") != "cpu"
    if wrong_device and state.get("distributed_type", DistributedType.NO) == DistributedType.NO:
        AcceleratorState._reset_state(reset_partial_state=True)
        return True
    if state.get("_mixed_precision", "no") != "no" and state.get("distributed_type") != DistributedType.DEEPSPEED:
        AcceleratorState._reset_state(reset_partial_state=False)
        return True
    return False
