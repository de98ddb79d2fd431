"""Look-ahead steps from the trainer's parameters (Algorithm 1 lines 6-11 of the Inf-DDS paper): the step
AdamW, RMSprop or SGD would take, reading the trainer's optimiser state and never writing it.
See :mod:`drmix.mixture.influence`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch


def trainable_parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def restore_parameters(params: Sequence[torch.Tensor], saved: Sequence[torch.Tensor]) -> None:
    """Copy ``saved`` back into ``params`` (after a look-ahead or a probe), outside autograd."""
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)


def lookahead_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None], lr: float,
                   optimizer: torch.optim.Optimizer | None = None,
                   mode: Literal["adam", "rmsprop", "sgd"] = "sgd") -> None:
    """One look-ahead step in place; the optimiser's state is read, never written.

    * ``adam``: the step AdamW would take with this gradient: ``m' = b1 m + (1-b1) g``,
      ``v' = b2 v + (1-b2) g^2``, ``theta -= lr (m'/(1-b1^(t+1))) / (sqrt(v'/(1-b2^(t+1))) + eps)`` and the
      decoupled weight decay; ``m'``, ``v'`` are temporaries (one parameter at a time).
    * ``rmsprop``: ``theta -= lr g / (sqrt(v_hat) + eps)`` with the trainer's frozen ``v_hat``; it can take
      very long steps for parameters whose past gradients were small.
    * ``sgd``: ``theta -= lr g``.

    Parameters without Adam state yet (or with a non-Adam optimiser) take a plain SGD step.
    """
    groups: dict[int, dict] = {}
    adaptive = mode in ("adam", "rmsprop") and optimizer is not None
    if adaptive:
        for group in optimizer.param_groups:
            for p in group["params"]:
                groups[id(p)] = group
    with torch.no_grad():
        for p, g in zip(params, grads):
            if g is None:
                continue
            state = optimizer.state.get(p) if adaptive else None
            if not (state and "exp_avg_sq" in state and id(p) in groups):
                p.add_(g, alpha=-lr)
                continue
            group = groups[id(p)]
            beta1, beta2 = group.get("betas", (0.9, 0.999))
            eps = group.get("eps", 1e-8)
            t = float(state["step"])
            if mode == "rmsprop":
                v_hat = state["exp_avg_sq"] / (1.0 - beta2 ** max(t, 1.0))
                p.addcdiv_(g, v_hat.sqrt().add_(eps), value=-lr)
                continue
            m_hat = (state["exp_avg"] * beta1 + g * (1.0 - beta1)) / (1.0 - beta1 ** (t + 1))
            v_hat = (state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)) / (1.0 - beta2 ** (t + 1))
            if group.get("weight_decay", 0.0):
                p.mul_(1.0 - lr * group["weight_decay"])
            p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)


def _unwrap_optimizer(optimizer: Any) -> torch.optim.Optimizer | None:
    """The torch optimiser inside an ``accelerate`` wrapper (its ``state`` is keyed by the parameters)."""
    return getattr(optimizer, "optimizer", optimizer)
