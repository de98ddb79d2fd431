"""Checks a training configuration must pass before anything is computed or written.

Each raises a :class:`~drmix.errors.ConfigError` naming the option and the fix, instead of a traceback
deep in the loop (and a ``config.yaml`` left behind by a run that never trained).
"""
from __future__ import annotations

import logging
import re
from typing import Any

import torch

from drmix.errors import ConfigError

log = logging.getLogger(__name__)

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|mps|xpu(:\d+)?)$")


def check_device(device: str | None) -> None:
    """Refuse a device that is unknown or absent (``--device cuda`` without a GPU)."""
    if device is None:
        return
    if not _DEVICE.match(device):
        raise ConfigError(f"unknown device {device!r}.", fix="use cpu, cuda, cuda:N, mps or xpu.")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: no CUDA GPU is available here.",
                              fix="use --device cpu, or leave --device out to pick the GPU when there is one.")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible.",
                              fix="pick an index below that, or set CUDA_VISIBLE_DEVICES.")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("--device mps: Apple's GPU backend is not available here.", fix="use --device cpu.")


def check_model_fit(config: Any, model: Any) -> None:
    """Refuse Matryoshka dimensions larger than the model's embedding."""
    dims = list(getattr(config, "matryoshka_dims", []) or [])
    if not dims:
        return
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    size = get()
    too_big = [d for d in dims if size is not None and d > size]
    if too_big:
        raise ConfigError(f"--matryoshka-dims {too_big} exceed the model's embedding size {size}.",
                          fix=f"use dimensions between 1 and {size}.")


def check_batch_fits(names: list[str], sizes: list[int], batch_size: int) -> None:
    """Refuse a batch larger than all training examples together: every batch would hold each example many
    times over (no new in-batch negatives) and memory would grow with the batch before the first step."""
    total = sum(sizes)
    if batch_size > total:
        shown = ", ".join(f"{n} {s}" for n, s in list(zip(names, sizes))[:5]) + (", ..." if len(names) > 5 else "")
        raise ConfigError(f"--batch-size {batch_size} is larger than the {total} training examples of all "
                          f"collections together ({shown}).",
                          fix=f"use --batch-size {total} or less (a batch holds distinct examples).")


def warn_small_collections(names: list[str], sizes: list[int], batch_size: int, batching: str) -> list[str]:
    """Warn when a homogeneous batch must repeat examples of a collection smaller than the batch."""
    if batching != "homogeneous":
        return []
    small = [f"{n} ({s})" for n, s in zip(names, sizes) if s < batch_size]
    if small:
        log.warning("collections smaller than the batch size %d repeat their examples within a batch "
                    "(repeated positives are in-batch false negatives): %s. Use a smaller --batch-size or "
                    "--batching mixed.", batch_size, ", ".join(small))
    return small
