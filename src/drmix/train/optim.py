"""The optimiser and learning-rate schedule of a training run: AdamW (fused where PyTorch has it, no
weight decay on biases and norms) with warm-up and linear, cosine or constant decay (transformers)."""
from __future__ import annotations

import math
from typing import Any

import torch

from drmix.config import TrainConfig

_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in n.lower() or n.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def adamw(groups: list[dict], lr: float) -> torch.optim.Optimizer:
    """AdamW, fused where PyTorch supports it (CPU and CUDA: much faster steps than the default; docs/benchmarks.md)."""
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # devices or dtypes without a fused kernel
        return torch.optim.AdamW(groups, lr=lr)


def warmup_steps(config: TrainConfig) -> int:
    """Warm-up steps: ``warmup_steps`` when given, else ``ceil(warmup_ratio x max_steps)``."""
    if config.optim.warmup_steps is not None:
        return config.optim.warmup_steps
    return math.ceil(config.optim.warmup_ratio * config.optim.max_steps)


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> tuple[torch.optim.Optimizer, Any]:
    """The optimiser and scheduler ``config`` asks for, over ``model``'s trainable parameters."""
    from transformers import get_scheduler

    optimizer = adamw(param_groups(model, config.optim.weight_decay), config.optim.learning_rate)
    scheduler = get_scheduler(_SCHEDULES[config.optim.scheduler], optimizer,
                              num_warmup_steps=warmup_steps(config),
                              num_training_steps=config.optim.max_steps)
    return optimizer, scheduler
