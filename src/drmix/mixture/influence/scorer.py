"""The sampling policy and its REINFORCE update (Algorithm 1 lines 3 and 17, section 3.3 of the Inf-DDS paper).

``P(i; psi) = softmax(psi)_i``; ``d_psi = sum_{i in S} P(i) I_i grad log P(i | S)`` (:func:`reinforce_gradient`),
an ascent step on ``psi`` by Adam (MultiDDS's scorer optimiser) or SGD. See :mod:`drmix.mixture.influence`.
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
    """The sampling policy psi with its own optimiser (gradient *ascent* on the expected reward)."""

    def __init__(self, psi0: np.ndarray, *, lr: float, optimizer: Literal["adam", "sgd"] = "adam") -> None:
        self.psi = torch.nn.Parameter(torch.tensor(psi0, dtype=torch.float64))
        if optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam([self.psi], lr=lr, maximize=True)
        else:
            self.optimizer = torch.optim.SGD([self.psi], lr=lr, maximize=True)

    def probs(self) -> np.ndarray:
        return softmax(self.psi.detach().numpy())

    def update(self, rewards: Sequence[float], subset: Sequence[int] | None = None) -> np.ndarray:
        """One REINFORCE step; returns the gradient used."""
        grad = reinforce_gradient(self.psi, torch.tensor(list(rewards), dtype=torch.float64), subset)
        self.optimizer.zero_grad(set_to_none=True)
        self.psi.grad = grad.clone()
        self.optimizer.step()
        return grad.numpy()

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
