"""The reward-weighted Reptile update (Algorithm 1 lines 12-14, section 3.3 of the Inf-DDS paper).

``theta <- theta + alpha sum_{i in S} p_i (theta_i - theta)``, kept in one delta buffer (an online softmax
when ``p = softmax(I / T)``). Hand-written: no library accumulates a softmax-weighted mean of parameter
lists online. See :mod:`drmix.mixture.influence`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch


class DeltaBuffer:
    """Running ``sum_i w_i (theta_i - theta) / sum_i w_i`` in one buffer (section 3.3, Reptile).

    With ``temperature`` set, ``w_i = exp(score_i / temperature)`` is accumulated as an online softmax:
    the buffer is rescaled whenever a larger score arrives, so ``p = softmax(scores / T)`` comes out
    exactly without keeping the M deltas. With ``temperature=None`` the scores are used as weights.
    """

    def __init__(self, like: Sequence[torch.Tensor], temperature: float | None) -> None:
        self.buf = [torch.zeros_like(t) for t in like]
        self.temperature = temperature
        self.norm = 0.0
        self.max = -math.inf

    def add(self, params: Sequence[torch.Tensor], saved: Sequence[torch.Tensor], score: float) -> None:
        if self.temperature is None:
            w = float(score)
        else:
            z = float(score) / self.temperature
            if z > self.max:
                scale = math.exp(self.max - z) if self.norm > 0 else 0.0
                for b in self.buf:
                    b.mul_(scale)
                self.norm *= scale
                self.max = z
            w = math.exp(z - self.max)
        with torch.no_grad():
            for b, p, s in zip(self.buf, params, saved):
                b.add_(p.detach() - s, alpha=w)
        self.norm += w

    def mean(self) -> list[torch.Tensor]:
        if self.norm <= 0:
            return [torch.zeros_like(b) for b in self.buf]
        return [b / self.norm for b in self.buf]


def reptile_update(params: Sequence[torch.Tensor], mean_delta: Sequence[torch.Tensor], alpha: float) -> None:
    """``theta <- theta + alpha * mean_delta`` in place."""
    with torch.no_grad():
        for p, d in zip(params, mean_delta):
            p.add_(d, alpha=alpha)
