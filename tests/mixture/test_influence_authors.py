"""Inf-DDS's sampler (REINFORCE) and Reptile steps side by side with the paper's Algorithm 1, written out plainly.

"Influence Guided Sampling for Domain Adaptation of Text Retrievers" (Inf-DDS): Algorithm 1 lines 12-18 and
section 3.3. No code of the authors is public; the references below transcribe the algorithm's lines in
plain numpy loops, and drmix's building blocks (``Scorer``, ``DeltaBuffer``, ``reptile_update`` of
:mod:`drmix.mixture.influence`, which ``InfluenceStrategy._influence`` and ``update`` call) run on the same
hand-made influences for tens of steps.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from drmix.mixture.influence import DeltaBuffer, Scorer, reptile_update


def _paper_d_psi(psi, rewards, subset):
    """Section 3.3: d_psi = sum_{i in S} P_D(i; psi) I^i grad_psi log P_D(i | S; psi), the gradient of the
    log by hand: d log P(i | S) / d psi_k = [k == i] - P(k | S) [k in S]."""
    p = np.exp(psi - psi.max())
    p = p / p.sum()
    p_s = p[subset] / p[subset].sum()
    d = np.zeros_like(psi)
    for i, r in zip(subset, rewards):
        for k in range(len(psi)):
            grad_log = (1.0 if k == i else 0.0) - (p_s[subset.index(k)] if k in subset else 0.0)
            d[k] += p[i] * r * grad_log
    return d


class _PaperAdamAscent:
    """Line 18, psi <- GradientUpdate(psi, d_psi): Adam ascent (beta 0.9, 0.999, eps 1e-8), written out."""

    def __init__(self, psi, lr):
        self.psi, self.lr = psi.copy(), lr
        self.m, self.v, self.t = np.zeros_like(psi), np.zeros_like(psi), 0

    def step(self, d_psi):
        self.t += 1
        g = -d_psi                                     # ascent = descent on -d_psi
        self.m = 0.9 * self.m + 0.1 * g
        self.v = 0.999 * self.v + 0.001 * g * g
        denom = np.sqrt(self.v) / math.sqrt(1 - 0.999 ** self.t) + 1e-8
        self.psi = self.psi - (self.lr / (1 - 0.9 ** self.t)) * self.m / denom


def test_reinforce_steps_match_algorithm_1():
    rng = np.random.default_rng(0)
    M = 6
    psi0 = rng.normal(size=M)
    ours, paper = Scorer(psi0, lr=0.05), _PaperAdamAscent(psi0, 0.05)
    for step in range(40):
        subset = sorted(rng.choice(M, size=int(rng.integers(2, M + 1)), replace=False).tolist())
        rewards = rng.normal(size=len(subset)) * 1e-3 + (np.asarray(subset) == 2) * 2e-3   # collection 2 helps
        full = len(subset) == M
        d = ours.update(rewards.tolist(), None if full else subset)
        expected = _paper_d_psi(paper.psi, rewards.tolist(), subset)
        np.testing.assert_allclose(d, expected, rtol=1e-9, atol=1e-15)
        paper.step(expected)
        np.testing.assert_allclose(ours.psi.detach().numpy(), paper.psi, rtol=1e-9, atol=1e-12)
    assert int(np.argmax(ours.probs())) == 2


def _params(rng):
    return [torch.tensor(rng.normal(size=(3, 2))), torch.tensor(rng.normal(size=4))]


def test_reward_normalised_reptile_matches_algorithm_1():
    """Lines 12-15: grad += I^i (theta^i - theta), S += I^i; theta <- theta + alpha grad / S (positive
    influences: drmix's default weighting ``positive`` is this rule when every influence is positive)."""
    rng = np.random.default_rng(1)
    theta = _params(rng)
    paper = [t.clone() for t in theta]
    for _ in range(20):
        influences = rng.uniform(1e-4, 3e-3, size=5)
        looked = [[t + torch.tensor(rng.normal(size=tuple(t.shape))) * 1e-2 for t in paper] for _ in influences]
        grad, total = [torch.zeros_like(t) for t in paper], 0.0
        for inf, th_i in zip(influences, looked):                       # the paper
            grad = [g + inf * (a - b) for g, a, b in zip(grad, th_i, paper)]
            total += inf
        paper = [t + 2e-2 * g / total for t, g in zip(paper, grad)]
        buf = DeltaBuffer(theta, None)                                   # drmix
        for inf, th_i in zip(influences, looked):
            buf.add(th_i, theta, float(inf))
        reptile_update(theta, buf.mean(), 2e-2)
        for a, b in zip(theta, paper):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


def test_softmax_reptile_matches_section_3_3():
    """Section 3.3: p_i = exp(I^i / tau) / sum_j exp(I^j / tau), theta <- theta + alpha sum_i p_i (theta^i - theta);
    drmix accumulates it as an online softmax (influences arriving in any order, some far apart)."""
    rng = np.random.default_rng(2)
    theta = _params(rng)
    paper = [t.clone() for t in theta]
    tau = 1e-3
    for _ in range(20):
        influences = rng.normal(size=5) * 5e-3
        looked = [[t + torch.tensor(rng.normal(size=tuple(t.shape))) * 1e-2 for t in paper] for _ in influences]
        p = np.exp(influences / tau - (influences / tau).max())
        p = p / p.sum()
        paper = [t + 3e-2 * sum(float(pi) * (th[k] - t) for pi, th in zip(p, looked)) for k, t in enumerate(paper)]
        buf = DeltaBuffer(theta, tau)
        for inf, th_i in zip(influences, looked):
            buf.add(th_i, theta, float(inf))
        reptile_update(theta, buf.mean(), 3e-2)
        for a, b in zip(theta, paper):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-13)
