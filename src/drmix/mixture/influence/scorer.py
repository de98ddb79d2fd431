"""The sampling policy and its update (Algorithm 1 lines 3 and 17, section 3.3 of the Inf-DDS paper; MultiDDS).

``P(i; psi) = softmax(psi)_i``. Inf-DDS: ``d_psi = sum_{i in S} P(i) I_i grad log P(i | S)``
(:func:`reinforce_gradient`), an ascent step on ``psi`` by Adam or SGD. MultiDDS (github.com/cindyxinyiwang/multiDDS,
``fairseq/trainer.py``, ``update_language_sampler``): its ``BaseActor`` is a bias vector (``psi``) trained by Adam on
``-sum_i R_i log softmax(psi)_i`` for ``data_actor_optim_step`` steps on the same rewards
(:func:`multidds_gradient`), after ``pretrain_data_actor`` fitted ``softmax(psi)`` to the size proportions by
mean squared error (:meth:`Scorer.pretrain`). See :mod:`drmix.mixture.influence`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from drmix.errors import ConfigError


def initial_scores(sizes: Sequence[int], temperature: float | None) -> np.ndarray:
    """psi_0 with softmax(psi_0) = |D_i|^(1/tau) / sum_j |D_j|^(1/tau) (Algorithm 1 line 3); uniform if tau is None."""
    sizes_arr = np.asarray(sizes, dtype=np.float64)
    if np.any(sizes_arr <= 0):
        raise ConfigError("every training collection needs at least one example for Inf-DDS.",
                          fix="remove empty collections from `data`.")
    if temperature is None or math.isinf(temperature):
        return np.zeros(len(sizes_arr))
    psi = np.log(sizes_arr) / temperature
    return psi - psi.max()


def softmax(psi: np.ndarray) -> np.ndarray:
    z = np.exp(psi - np.max(psi))
    return z / z.sum()


def reinforce_gradient(psi: torch.Tensor, rewards: torch.Tensor, subset: Sequence[int] | None = None) -> torch.Tensor:
    """Ascent direction ``d_psi = sum_{i in S} P(i) R_i grad_psi log P(i | S)`` (section 3.3).

    ``rewards`` holds one reward per member of ``subset`` (in that order), or one per collection when
    ``subset`` is None (then ``P(i | S) = P(i)``, Algorithm 1 line 17). Computed with autograd on the
    surrogate ``sum_i stopgrad(P(i)) R_i log P(i | S)``.
    """
    psi = psi.detach().clone().requires_grad_(True)
    idx = torch.arange(psi.numel()) if subset is None else torch.as_tensor(list(subset), dtype=torch.long)
    p_full = torch.softmax(psi, dim=0)
    log_p_cond = torch.log_softmax(psi[idx], dim=0)  # log P(i | S) = psi_i - logsumexp_{j in S} psi_j
    surrogate = (p_full[idx].detach() * rewards.to(psi.dtype) * log_p_cond).sum()
    (grad,) = torch.autograd.grad(surrogate, psi)
    return grad.detach()


def multidds_gradient(psi: torch.Tensor, rewards: torch.Tensor, subset: Sequence[int] | None = None) -> torch.Tensor:
    """Ascent direction of the MultiDDS actor: ``grad_psi sum_{i in S} R_i log P(i | S)`` -- minus the gradient of
    its loss ``-(log_softmax(a_logits) * grad_scale).sum()`` (no ``P(i)`` factor, unlike :func:`reinforce_gradient`).
    The authors score every dataset (``subset`` None); a subset conditions the policy on it."""
    psi = psi.detach().clone().requires_grad_(True)
    idx = torch.arange(psi.numel()) if subset is None else torch.as_tensor(list(subset), dtype=torch.long)
    objective = (torch.log_softmax(psi[idx], dim=0) * rewards.to(psi.dtype)).sum()
    (grad,) = torch.autograd.grad(objective, psi)
    return grad.detach()


def scale_rewards(rewards: Sequence[float], mode: Literal["none", "std"]) -> list[float]:
    """Rewards divided by their (population) standard deviation over the scored subset when ``mode="std"``.

    Only the scale matters: adding a constant to every reward leaves ``d_psi`` unchanged (the policy-gradient
    baseline identity, which holds for the subset-conditional gradient too), so no mean is subtracted.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if mode == "std" and r.size > 1 and r.std() > 0:
        r = r / r.std()
    return r.tolist()


class Scorer:
    """The sampling policy psi with its own optimiser (gradient *ascent* on the expected reward).

    ``steps`` optimiser steps per update on the same rewards, the direction recomputed at each
    (``objective``: ``reinforce`` = :func:`reinforce_gradient`, ``multidds`` = :func:`multidds_gradient`).
    """

    def __init__(self, psi0: np.ndarray, *, lr: float, optimizer: Literal["adam", "sgd"] = "adam", steps: int = 1,
                 objective: Literal["reinforce", "multidds"] = "reinforce") -> None:
        self.psi = torch.nn.Parameter(torch.tensor(psi0, dtype=torch.float64))
        self.lr, self.steps, self.objective = lr, steps, objective
        if optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam([self.psi], lr=lr, maximize=True)
        else:
            self.optimizer = torch.optim.SGD([self.psi], lr=lr, maximize=True)

    def probs(self) -> np.ndarray:
        return softmax(self.psi.detach().numpy())

    def pretrain(self, target: np.ndarray, *, lr: float = 1e-3, tol: float = 1e-6, max_steps: int = 200_000) -> int:
        """MultiDDS's ``pretrain_data_actor``: with the learning rate set to ``lr``, minimise
        ``mse_loss(softmax(psi), target)`` one optimiser step at a time until the loss measured before a step is
        at most ``tol`` (that step is still taken, as in the authors' loop); then the learning rate goes back to the scorer's, the optimiser's state (Adam's moments
        and step count) kept. Returns the steps taken (``max_steps`` at most, with a warning)."""
        target_t = torch.as_tensor(np.asarray(target, dtype=np.float64))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        steps, loss = 0, math.inf
        while loss > tol:                              # as the authors' `while l > 0.000001`: the step is taken
            if steps >= max_steps:                     # with the loss measured before it, the last one included
                import logging

                logging.getLogger(__name__).warning("scorer pretraining stopped after %d steps above %g", steps, tol)
                break
            mse = torch.nn.functional.mse_loss(torch.softmax(self.psi, dim=0), target_t)
            loss = mse.item()
            (grad,) = torch.autograd.grad(mse, self.psi)
            self.optimizer.zero_grad(set_to_none=True)
            self.psi.grad = -grad                      # the optimiser maximises: descend on the MSE
            self.optimizer.step()
            steps += 1
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        return steps

    def update(self, rewards: Sequence[float], subset: Sequence[int] | None = None) -> np.ndarray:
        """``steps`` optimiser steps on the same rewards; returns the first step's ascent direction."""
        direction = multidds_gradient if self.objective == "multidds" else reinforce_gradient
        r = torch.tensor(list(rewards), dtype=torch.float64)
        first = None
        for _ in range(self.steps):
            grad = direction(self.psi, r, subset)
            first = grad if first is None else first
            self.optimizer.zero_grad(set_to_none=True)
            self.psi.grad = grad.clone()
            self.optimizer.step()
        return first.numpy()

    def state_dict(self) -> dict:
        state = self.optimizer.state.get(self.psi, {})
        return {"psi": self.psi.detach().tolist(),
                "optimizer": {k: (v.tolist() if torch.is_tensor(v) else v) for k, v in state.items()}}

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.psi.copy_(torch.tensor(state["psi"], dtype=torch.float64))
        opt_state = {k: torch.tensor(v, dtype=torch.float64 if k != "step" else torch.float32)
                     for k, v in state.get("optimizer", {}).items()}
        self.optimizer.state.clear()
        if opt_state:
            self.optimizer.state[self.psi] = opt_state
