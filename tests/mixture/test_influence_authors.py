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


def _paper_conditional(psi, subset):
    """Section 3.3 as written: P_D(i; psi) = exp(psi_i) / sum_j exp(psi_j); P_D(i | S; psi) = P_D(i) / sum_{j in S}
    P_D(j) for i in S."""
    p = np.exp(psi) / np.exp(psi).sum()
    return {i: p[i] / sum(p[j] for j in subset) for i in subset}


def _paper_d_psi(psi, rewards, subset, h=1e-3):
    """Line 17 / section 3.3: d_psi = sum_{i in S} P_D(i; psi) I^i grad_psi log P_D(i | S; psi), the gradient of the
    log taken numerically (five-point central differences of the formula above, error ~1e-12), so nothing of
    drmix's derivation enters."""
    p = np.exp(psi) / np.exp(psi).sum()
    d = np.zeros_like(psi)
    for k in range(len(psi)):
        logs = []
        for step in (2 * h, h, -h, -2 * h):
            moved = psi.copy()
            moved[k] += step
            logs.append(_paper_conditional(moved, subset))
        for i, r in zip(subset, rewards):
            f2, f1, m1, m2 = (math.log(c[i]) for c in logs)
            d[k] += p[i] * r * (-f2 + 8 * f1 - 8 * m1 + m2) / (12 * h)
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
        np.testing.assert_allclose(d, expected, rtol=1e-7, atol=1e-13)   # the numerical gradient's precision
        paper.step(expected)
        np.testing.assert_allclose(ours.psi.detach().numpy(), paper.psi, rtol=1e-7, atol=1e-9)
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


# ---------------------------------------------------------------------------------------------------------------
# MultiDDS (github.com/cindyxinyiwang/multiDDS): fairseq/trainer.py update_language_sampler and pretrain_data_actor,
# fairseq/optim/fairseq_optimizer.py, fairseq/models/data_actor.py BaseActor, job_scripts/*/multidds.sh
# ---------------------------------------------------------------------------------------------------------------

class _FairseqOptimizer:
    """The parts of ``FairseqOptimizer`` that ``update_language_sampler`` calls, transcribed."""

    def __init__(self, params):
        self.params = list(params)
        self.state = {p: {} for p in self.params}

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def clone_param(self):
        for p in self.params:
            self.state[p]["param_copy"] = p.data.clone()

    def save_train_grad_t0(self):
        for p in self.params:
            if p.grad is None:
                continue
            self.state[p]["dev_grad"] = p.grad.data.clone()

    def add_grad(self, eta):
        for p in self.params:
            if p.grad is None:
                continue
            p.data += self.state[p]["dev_grad"] * eta

    def switch_param(self, clear_cache=False):
        for p in self.params:
            cur = p.data
            p.data = self.state[p]["param_copy"]
            self.state[p]["param_copy"] = None if clear_cache else cur

    def get_grad_sim(self):
        prod, norm, dev_norm = 0, 0, 0
        for p in self.params:
            if p.grad is None:
                continue
            prod += (self.state[p]["dev_grad"] * p.grad.data).sum().item()
            norm += p.grad.data.norm(2) ** 2
            dev_norm += self.state[p]["dev_grad"].norm(2) ** 2
        return (prod / ((norm * dev_norm) ** 0.5 + 1e-10)).item()


def _authors_rewards(model, loss_of, train_batches, dev_batches):
    """``update_language_sampler``'s reward loop: per dataset, train_step (backward), save_train_grad_t0, zero_grad,
    add_grad(eta=0.001), a train_step on every dev set (their gradients accumulate), get_grad_sim, zero_grad,
    switch_param. Returns the rewards and whether add_grad moved any parameter."""
    opt = _FairseqOptimizer(model.parameters())
    opt.zero_grad()
    opt.clone_param()
    sims, moved = [], False
    for tb in train_batches:
        loss_of(tb).backward()
        opt.save_train_grad_t0()
        opt.zero_grad()
        before = [p.detach().clone() for p in opt.params]
        opt.add_grad(eta=0.001)
        moved = moved or any(not torch.equal(a, p) for a, p in zip(before, opt.params))
        for vb in dev_batches:
            loss_of(vb).backward()
        sims.append(opt.get_grad_sim())
        opt.zero_grad()
        opt.switch_param()
    opt.switch_param(clear_cache=True)
    return sims, moved


def test_multidds_reward_matches_the_authors_code():
    """Two training datasets, two dev sets, a small network: drmix's reward (the strategy's default,
    probe_step 0) is the authors' -- the dev gradients summed, and their add_grad a no-op after zero_grad."""
    from drmix.data.batch import Batch
    from drmix.mixture.influence.metrics import probe_gradcos_rewards

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    data = {i: (torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)) for i in range(4)}

    def losses(batch):
        x, y = data[int(batch.collection_ids[0])]
        return ((model(x) - y) ** 2).sum(-1)

    def batch(i):
        return Batch(["q"] * 6, ["p"] * 6, [[]] * 6, np.full(6, i, dtype=np.int64))

    before = [p.detach().clone() for p in model.parameters()]
    theirs, moved = _authors_rewards(model, lambda b: losses(b).mean(), [batch(0), batch(1)], [batch(2), batch(3)])
    assert not moved                                       # the authors' probe step never happens
    ours = probe_gradcos_rewards(losses, list(model.parameters()), [batch(0), batch(1)], [batch(2), batch(3)], 0.0)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    # and it is not the mean of the per-dev cosines (drmix's earlier rule, gradcos: per_dev)
    from drmix.mixture.influence.metrics import flat_grad, gradcos_rewards

    params = list(model.parameters())
    per_dev = gradcos_rewards(losses, params, [batch(0), batch(1)], [flat_grad(losses, params, batch(j)) for j in (2, 3)])
    assert np.abs(np.asarray(per_dev) - np.asarray(theirs)).max() > 1e-3


class _AuthorsActor:
    """``BaseActor`` (a zero-initialised ``Linear(k, 1)`` whose weight times a ones feature are the logits) with
    its ``torch.optim.Adam`` at ``data_actor_lr``; ``pretrain_data_actor`` (lr 0.001, MSE to the size proportions
    while ``l > 1e-6``) and the actor loop of ``update_language_sampler`` (``data_actor_optim_step`` steps)."""

    def __init__(self, k, lr):
        self.bias = torch.nn.Linear(k, 1).double()
        for p in self.bias.parameters():
            p.data.fill_(0.0)
        self.opt = torch.optim.Adam([p for p in self.bias.parameters() if p.requires_grad], lr=lr)
        self.lr, self.feature = lr, torch.ones(1, k, dtype=torch.float64)

    def logits(self):
        return self.bias.weight * self.feature

    def pretrain(self, target):
        target = torch.as_tensor(target).view(1, -1)
        for group in self.opt.param_groups:
            group["lr"] = 0.001
        loss_value = 100
        while loss_value > 0.000001:
            loss = torch.nn.functional.mse_loss(torch.softmax(self.logits(), dim=-1), target)
            loss_value = loss.item()
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
        for group in self.opt.param_groups:
            group["lr"] = self.lr

    def update(self, sims, steps):
        grad_scale = torch.tensor(sims, dtype=torch.float64).view(1, -1)
        for _ in range(steps):
            loss = -torch.nn.functional.log_softmax(self.logits(), dim=-1)
            loss = (loss * grad_scale).sum()
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
        return torch.softmax(self.logits(), dim=-1).detach().view(-1).numpy()


def test_multidds_actor_matches_the_authors_code():
    """Sizes 100/400/1500 (pretraining to the size proportions takes thousands of Adam steps), then three updates
    of 200 Adam steps at 1e-4 on fixed rewards: the same probabilities as the authors' actor at every update."""
    from drmix.mixture.influence import InfDDSConfig, MultiDDSStrategy

    sizes = [100, 400, 1500]
    strat = MultiDDSStrategy(InfDDSConfig(), seed=0)
    strat.setup(["a", "b", "c"], sizes)
    theirs = _AuthorsActor(3, 1e-4)
    theirs.pretrain(np.asarray(sizes, dtype=np.float64) / sum(sizes))
    np.testing.assert_allclose(strat.sampling_weights(), torch.softmax(theirs.logits(), -1).detach().view(-1).numpy(),
                               rtol=1e-10)
    rng = np.random.default_rng(0)
    for _ in range(3):
        sims = rng.uniform(-0.2, 0.6, size=3).tolist()
        expected = theirs.update(sims, 200)
        strat.scorer.update(sims)
        np.testing.assert_allclose(strat.sampling_weights(), expected, rtol=1e-9)
    assert np.abs(strat.sampling_weights() - np.asarray(sizes) / sum(sizes)).max() > 1e-3   # it moved
