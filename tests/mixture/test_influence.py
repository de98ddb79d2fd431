"""Inf-DDS / MultiDDS: policy initialisation, REINFORCE gradient, Reptile combination, look-ahead, resume."""
from __future__ import annotations

import json
import logging
import math
import random

import numpy as np
import pytest
import torch

from drmix.errors import ConfigError
from drmix.data.batch import Batch
from drmix.mixture.base import StepContext
from drmix.mixture.influence import (
    DeltaBuffer,
    InfDDSConfig,
    InfluenceStrategy,
    MultiDDSStrategy,
    Scorer,
    batch_ndcg,
    dev_loss_metric,
    dev_ndcg_metric,
    initial_scores,
    lookahead_step,
    reinforce_gradient,
    reptile_update,
    scale_rewards,
    softmax,
    trainable_parameters,
)


# ---------------------------------------------------------------------------------------------------
# Policy initialisation and REINFORCE
# ---------------------------------------------------------------------------------------------------

def test_initial_policy_follows_size_temperature():
    # sizes 10 and 1000: tau=1 -> 10/1010, 1000/1010; tau=2 -> sqrt: 3.1623/34.785, 31.623/34.785
    assert softmax(initial_scores([10, 1000], 1.0)) == pytest.approx([10 / 1010, 1000 / 1010])
    assert softmax(initial_scores([10, 1000], 2.0)) == pytest.approx([0.0909091, 0.9090909], abs=1e-6)
    assert softmax(initial_scores([10, 1000], None)) == pytest.approx([0.5, 0.5])
    with pytest.raises(ConfigError):
        initial_scores([0, 5], 1.0)


PSI = torch.tensor([0.0, math.log(2.0), 0.0], dtype=torch.float64)  # P = [1/4, 1/2, 1/4]


def test_reinforce_gradient_full_set():
    # d_k = P_k (I_k - sum_i P_i I_i); I = [1, 0, -1] -> sum_i P_i I_i = 1/4 - 1/4 = 0
    # d = [1/4 * 1, 1/2 * 0, 1/4 * -1] = [0.25, 0, -0.25]
    d = reinforce_gradient(PSI, torch.tensor([1.0, 0.0, -1.0]))
    assert d.tolist() == pytest.approx([0.25, 0.0, -0.25])


def test_reinforce_gradient_conditional_on_subset():
    # S = {0, 1}, rewards I_0 = 1, I_1 = 0. P(.|S) = [1/3, 2/3]; sum_{i in S} P_i I_i = 1/4.
    # d_0 = P_0 I_0 - P(0|S) * 1/4 = 1/4 - 1/12 = 1/6
    # d_1 = P_1 I_1 - P(1|S) * 1/4 = 0 - 1/6   = -1/6
    # d_2 = 0 (not in S: log P(i|S) does not depend on psi_2)
    d = reinforce_gradient(PSI, torch.tensor([1.0, 0.0]), subset=[0, 1])
    assert d.tolist() == pytest.approx([1 / 6, -1 / 6, 0.0])
    # The conditional gradient differs from the unconditional one restricted to S (which would be
    # P_k (I_k - sum_all P_i I_i) with I_2 = 0: [0.25 - 0.0625, -0.125, -0.0625]).
    full = reinforce_gradient(PSI, torch.tensor([1.0, 0.0, 0.0]))
    assert full.tolist() == pytest.approx([0.1875, -0.125, -0.0625])


def test_scorer_steps_sgd_and_adam():
    sgd = Scorer(PSI.numpy(), lr=1.0, optimizer="sgd")
    sgd.update([1.0, 0.0, -1.0])  # psi + d = [0.25, ln 2, -0.25]
    assert sgd.psi.tolist() == pytest.approx([0.25, math.log(2.0), -0.25])
    adam = Scorer(PSI.numpy(), lr=0.1, optimizer="adam")
    adam.update([1.0, 0.0, -1.0])  # first Adam step moves by lr * sign(d); zero gradient -> no move
    assert adam.psi.tolist() == pytest.approx([0.1, math.log(2.0), -0.1], abs=1e-6)


def test_reward_scaling_keeps_direction_and_ratios():
    # std of [1, 0, -1] (population) = sqrt(2/3) = 0.8164966 -> [1.2247449, 0, -1.2247449]
    assert scale_rewards([1.0, 0.0, -1.0], "std") == pytest.approx([1.2247449, 0.0, -1.2247449])
    assert scale_rewards([1.0, 0.0, -1.0], "none") == [1.0, 0.0, -1.0]
    assert scale_rewards([0.3, 0.3], "std") == [0.3, 0.3]  # zero spread: unchanged
    # a constant added to every reward does not change the REINFORCE direction (baseline identity)
    d = reinforce_gradient(PSI, torch.tensor([1.0, 0.0]), subset=[0, 1])
    shifted = reinforce_gradient(PSI, torch.tensor([6.0, 5.0]), subset=[0, 1])
    assert shifted.tolist() == pytest.approx(d.tolist())


# ---------------------------------------------------------------------------------------------------
# Reptile combination and look-ahead steps
# ---------------------------------------------------------------------------------------------------

def test_reptile_softmax_weighted_deltas_on_linear_layer():
    layer = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, -1.0]]))
    params = [layer.weight]
    saved = [layer.weight.detach().clone()]
    buf = DeltaBuffer(saved, temperature=1.0)
    # deltas added out of score order, so the online softmax has to rescale: scores ln2, 0, ln3
    # -> weights 2/6, 1/6, 3/6; mean delta = (2*[1,0] + 1*[0,1] + 3*[2,2]) / 6 = [8/6, 7/6]
    for delta, score in (([1.0, 0.0], math.log(2)), ([0.0, 1.0], 0.0), ([2.0, 2.0], math.log(3))):
        with torch.no_grad():
            layer.weight.copy_(saved[0] + torch.tensor([delta]))
        buf.add(params, saved, score)
        with torch.no_grad():
            layer.weight.copy_(saved[0])
    mean = buf.mean()
    assert mean[0].flatten().tolist() == pytest.approx([8 / 6, 7 / 6])
    reptile_update(params, mean, alpha=0.5)  # [1, -1] + 0.5 * [8/6, 7/6]
    assert layer.weight.flatten().tolist() == pytest.approx([1 + 4 / 6, -1 + 7 / 12])


def test_reptile_fixed_weights():
    saved = [torch.zeros(2)]
    buf = DeltaBuffer(saved, temperature=None)
    buf.add([torch.tensor([1.0, 0.0])], saved, 0.25)
    buf.add([torch.tensor([0.0, 4.0])], saved, 0.75)
    assert buf.mean()[0].tolist() == pytest.approx([0.25, 3.0])


def test_lookahead_step_sgd_rmsprop_and_adam():
    p = torch.nn.Parameter(torch.tensor([1.0]))
    lookahead_step([p], [torch.tensor([2.0])], lr=0.1)
    assert p.item() == pytest.approx(0.8)
    # after one AdamW step with gradient 2 (betas .9/.999): m = 0.2, v = 0.004, step = 1, v_hat = 4
    q = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.AdamW([q], lr=0.01, weight_decay=0.0)
    q.grad = torch.tensor([2.0])
    opt.step()
    before = q.item()
    state = {k: v.clone() for k, v in opt.state[q].items()}
    # rmsprop: -lr * 3 / sqrt(4) = -0.15
    lookahead_step([q], [torch.tensor([3.0])], lr=0.1, optimizer=opt, mode="rmsprop")
    assert q.item() == pytest.approx(before - 0.15, abs=1e-6)
    with torch.no_grad():
        q.fill_(before)
    # adam: m' = .9*.2 + .1*3 = 0.48, v' = .999*.004 + .001*9 = 0.012996; t = 2:
    # m_hat = 0.48 / 0.19 = 2.5263158, v_hat = 0.012996 / 0.001999 = 6.5012506, step = 0.1 * 2.5263158 / 2.5497550
    lookahead_step([q], [torch.tensor([3.0])], lr=0.1, optimizer=opt, mode="adam")
    assert q.item() == pytest.approx(before - 0.0990807, abs=1e-5)
    assert all(torch.equal(opt.state[q][k], v) for k, v in state.items())  # the trainer's state is untouched


def test_batch_ndcg_hand_computed():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    docs = torch.tensor([[0.9, 0.1], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    # query 0's relevant doc 0 ranks 2nd (doc 1 scores 1.0 > 0.9): 1/log2(3) = 0.63093; query 1: rank 1 -> 1
    assert batch_ndcg(q, docs, [0, 2], k=10) == pytest.approx((1 / math.log2(3) + 1) / 2)
    assert batch_ndcg(q, docs, [0, 2], k=1) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------------
# The strategy on a toy quadratic model (everything computable by hand)
# ---------------------------------------------------------------------------------------------------

class ToyTask:
    """Scalar model w (starts at 0); collection i has per-example loss (w - a_i)^2 / 2, dev loss (w - d)^2 / 2."""

    def __init__(self, targets=(1.0, -1.0), dev=1.0, lr=0.5):
        self.model = torch.nn.Linear(1, 1, bias=False)
        with torch.no_grad():
            self.model.weight.zero_()
        self.targets = list(targets)
        self.dev = dev
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.logged: list[dict] = []
        self.drawn: list[int] = []

    def losses(self, batch: Batch) -> torch.Tensor:
        w = self.model.weight.reshape(())
        t = torch.tensor([self.dev if c < 0 else self.targets[c] for c in batch.collection_ids])
        return (w - t) ** 2 / 2

    def batch(self, c: int, n: int) -> Batch:
        self.drawn.append(c)
        return Batch(["q"] * n, ["p"] * n, [[] for _ in range(n)], np.full(n, c, dtype=np.int64))

    def ctx(self, step: int) -> StepContext:
        return StepContext(step=step, model=self.model, optimizer=self.optimizer, scheduler=None,
                           collection_names=["near", "far"], collection_sizes=[10, 10],
                           compute_losses=self.losses, draw_batch=self.batch, dev_names=["dev"],
                           draw_dev_batch=lambda j, n: self.batch(-1, n), log=self.logged.append)


def toy_config(**kw) -> InfDDSConfig:
    base = dict(update_every=1, warmup_steps=0, lookahead_optimizer="sgd", scorer_lr=0.1,
                train_batch_size=2, dev_batch_size=2)
    base.update(kw)
    return InfDDSConfig(**base)


def test_influence_update_hand_computed():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    # SGD look-ahead at lr 0.5 from w=0: w_near = 0.5, w_far = -0.5.
    # M = -(w - 1)^2/2: base -0.5; near: -0.125 -> I = 0.375; far: -1.125 -> I = -0.625
    rec = strat.trajectory_record(1)
    assert rec["rewards"] == pytest.approx({"near": 0.375, "far": -0.625})
    assert rec["influence_per_dev"]["near"] == pytest.approx({"dev": 0.375})
    # REINFORCE: P = [.5, .5], mean reward -0.125, d = [.5 * .5, .5 * -.5] = [.25, -.25]; Adam lr 0.1
    assert strat.scorer.psi.tolist() == pytest.approx([0.1, -0.1], abs=1e-6)
    assert list(rec["weights"].values()) == pytest.approx(softmax(np.array([0.1, -0.1])).tolist())
    # Reptile (default "positive", Algorithm 1's sum_i I_i (theta_i - theta) / sum_i I_i over I > 0): only near
    # (I = .375) counts -> mean delta = 0.5 (near's look-ahead delta). In gradient units (the default: line 12's
    # cache read as a gradient, the delta over the look-ahead step size .5 = 1), alpha = lr = .5 -> w = .5:
    # theta moves to near's look-ahead model, one step as long as a training step.
    assert task.model.weight.item() == pytest.approx(0.5, abs=1e-7)
    log_rec = task.logged[0]
    assert log_rec["rewards"] == pytest.approx({"near": 0.375, "far": -0.625})
    assert list(log_rec["weights"].values()) == pytest.approx(softmax(np.array([0.1, -0.1])).tolist())
    assert strat.final_weights()["updates"] == 1


def test_reptile_in_parameter_units_and_its_alpha():
    """reptile_units: parameters (drmix's earlier reading): theta + alpha * delta, so at alpha = lr = .5 the step is
    half the delta: w = .25; an explicit reptile_alpha scales the gradient-units step: alpha .25 / lr .5 -> w = .25."""
    for kw in ({"reptile_units": "parameters"}, {"reptile_alpha": 0.25}):
        task = ToyTask()
        strat = InfluenceStrategy(toy_config(**kw), seed=0)
        strat.setup(["near", "far"], [10, 10])
        strat.after_step(task.ctx(1))
        assert task.model.weight.item() == pytest.approx(0.25, abs=1e-7)
    # a look-ahead step size other than the learning rate: delta = .2 * 1 = .2 (lookahead_lr .2), gradient units
    # delta / .2 = 1, alpha = lr .5 -> w = .5 (one training step's length, not the look-ahead's)
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(lookahead_lr=0.2), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    assert task.model.weight.item() == pytest.approx(0.5, abs=1e-7)


def test_reptile_softmax_temperature_option_hand_computed():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(reptile_weights="influence"), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    # p = softmax([.375, -.625]) = [0.7310586, 0.2689414]; mean delta = .5 * (p0 - p1) = 0.2310586;
    # gradient units: alpha / lr = 1 -> w = 0.2310586
    assert task.model.weight.item() == pytest.approx(0.2310586, abs=1e-6)


def test_reptile_weighting_on_three_candidates():
    # targets 1, -1, 0.5, dev 1, SGD look-ahead lr .5 from w = 0: w_i = .5 a_i = .5, -.5, .25;
    # M = -(w - 1)^2 / 2, base -.5 -> I = .375, -.625, -(.75^2)/2 + .5 = .21875.
    # positive weights: .375 / .59375 and .21875 / .59375 (far left out):
    # mean delta = (.375 * .5 + .21875 * .25) / .59375 = 0.4078947; alpha / lr = 1 -> w = 0.4078947
    task = ToyTask(targets=(1.0, -1.0, 0.5))
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["a", "b", "c"], [5, 5, 5])
    ctx = task.ctx(1)
    ctx.collection_names = ["a", "b", "c"]
    strat.after_step(ctx)
    assert strat.trajectory_record(1)["rewards"] == pytest.approx({"a": 0.375, "b": -0.625, "c": 0.21875})
    assert task.model.weight.item() == pytest.approx(0.4078947, abs=1e-6)
    # softmax(I / 1) over influences of order 1e-3 (what loss influences measure at fine-tuning rates) is
    # uniform to 0.1%: the reason the softmax is not the default.
    p = softmax(np.array([1e-3, -1e-3, 5e-4]))
    assert p.max() / p.min() < 1.0021


def test_influence_update_with_the_default_adam_lookahead_hand_computed():
    # The trainer's AdamW (lr .5, betas .9/.999, no decay) has taken one step with gradient 2:
    # m = .2, v = .004, step 1. w is then reset to 0. Look-ahead = the AdamW step from those moments, t = 2:
    #   near: g = w - 1 = -1: m' = .18 - .1 = .08, v' = .999*.004 + .001 = .004996,
    #         w = -.5 * (.08/.19) / (sqrt(.004996/.001999) + 1e-8) = -0.1331685
    #   far:  g = w + 1 = 1: m' = .28 -> w = -.5 * (.28/.19) / sqrt(.004996/.001999) = -0.4660898
    # M = -(w - 1)^2 / 2, base -.5: I_near = .5 - 1.1331685^2 / 2 = -0.1420354,
    #                               I_far  = .5 - 1.4660898^2 / 2 = -0.5747097.
    # No influence is positive: no Reptile step, w stays 0. (The SGD look-ahead would give +.375 / -.625.)
    task = ToyTask()
    task.optimizer = torch.optim.AdamW(task.model.parameters(), lr=0.5, weight_decay=0.0)
    task.model.weight.grad = torch.tensor([[2.0]])
    task.optimizer.step()
    with torch.no_grad():
        task.model.weight.zero_()
    strat = InfluenceStrategy(toy_config(lookahead_optimizer="adam"), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    rewards = strat.trajectory_record(1)["rewards"]
    assert rewards == pytest.approx({"near": -0.1420354, "far": -0.5747097}, abs=1e-6)
    assert task.model.weight.item() == 0.0


def test_non_finite_influence_never_reaches_reptile_or_policy(caplog):
    task = ToyTask(targets=(1.0, float("nan")))
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.influence"):
        strat.after_step(task.ctx(1))
    # far's look-ahead is NaN: left out. near alone: Reptile moves w to near's look-ahead .5; the policy update
    # conditions on {near}: P(near | S) = 1 -> d_psi = [P_near I - 1 * P_near I, 0] = 0: psi unchanged.
    assert task.model.weight.item() == pytest.approx(0.5)
    assert np.isfinite(strat.scorer.psi.detach().numpy()).all()
    assert strat.sampling_weights().tolist() == pytest.approx([0.5, 0.5])
    assert any("non-finite reward" in r.message for r in caplog.records)


def test_dev_set_without_negatives_and_zero_loss_is_an_error():
    task = ToyTask()
    task.losses_orig = task.losses
    task.losses = lambda batch: task.losses_orig(batch) * 0.0      # InfoNCE with one candidate: exactly 0
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    with pytest.raises(ConfigError, match="cannot produce a non-zero loss"):
        strat.after_step(task.ctx(1))
    assert task.model.weight.item() == 0.0


def test_reptile_off_restores_parameters_exactly():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(reptile=False, lookahead_steps=3), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    assert task.model.weight.item() == 0.0
    # 3 SGD steps at lr .5 towards 1: w = .5, .75, .875 -> I = -(0.125^2)/2 + 0.5 = 0.4921875
    assert strat.trajectory_record(1)["rewards"]["near"] == pytest.approx(0.4921875)
    assert task.drawn.count(0) == 3 and task.drawn.count(1) == 3


class ToyTask2(ToyTask):
    """Two parameters w (start at 0); collection i has loss ||w - t_i||^2 / 2, the dev set ||w - d||^2 / 2."""

    def __init__(self, targets, dev):
        super().__init__()
        self.model = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.model.weight.zero_()
        self.targets = [torch.tensor(t) for t in targets]
        self.dev = torch.tensor(dev)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)

    def losses(self, batch: Batch) -> torch.Tensor:
        w = self.model.weight.reshape(2)
        return torch.stack([((w - (self.dev if c < 0 else self.targets[c])) ** 2).sum() / 2
                            for c in batch.collection_ids])


def test_multidds_gradient_cosine_reward():
    task = ToyTask2(targets=([1.0, 0.0], [0.0, 1.0]), dev=[2.0, 1.0])
    strat = MultiDDSStrategy(toy_config(scorer_steps=1, scorer_objective="reinforce", scorer_pretrain=False,
                                        gradcos="per_dev"), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    # at w = 0: grad near = -(1, 0), far = -(0, 1), dev = -(2, 1) -> cos = 2/sqrt(5), 1/sqrt(5)
    assert strat.trajectory_record(1)["rewards"] == pytest.approx({"near": 2 / math.sqrt(5),
                                                                  "far": 1 / math.sqrt(5)})
    assert task.model.weight.flatten().tolist() == [0.0, 0.0]      # MultiDDS never moves the model
    # REINFORCE: d = P_k (r_k - sum P r) = .5 * (+-.5 * (2 - 1)/sqrt(5)) -> Adam's first step +-lr = +-0.1
    assert strat.scorer.psi.tolist() == pytest.approx([0.1, -0.1], abs=1e-6)


def test_multidds_defaults_are_the_authors_and_the_probe_option():
    """MultiDDS's defaults (its job script and trainer); the probe point theta + 0.001 g of the option:
    near g = -(1, 0) -> w' = (-.001, 0), dev gradient w' - d = (-2.001, -1): cos = 2.001 / sqrt(2.001^2 + 1);
    far g = -(0, 1) -> dev gradient (-2, -1.001): cos = 1.001 / sqrt(4 + 1.001^2)."""
    c = MultiDDSStrategy(InfDDSConfig()).config
    assert (c.reward, c.update_every, c.warmup_steps, c.scorer_lr, c.scorer_steps, c.scorer_objective,
            c.scorer_pretrain, c.init_temperature, c.gradcos, c.probe_step) == (
        "gradcos", 1000, 0, 1e-4, 200, "multidds", True, 1.0, "authors", 0.0)
    assert InfluenceStrategy(InfDDSConfig()).config.scorer_steps == 1          # Inf-DDS keeps its own
    assert MultiDDSStrategy(InfDDSConfig(update_every=7)).config.update_every == 7   # a set field wins
    task = ToyTask2(targets=([1.0, 0.0], [0.0, 1.0]), dev=[2.0, 1.0])
    strat = MultiDDSStrategy(toy_config(probe_step=1e-3), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    assert strat.trajectory_record(1)["rewards"] == pytest.approx(
        {"near": 2.001 / math.sqrt(2.001 ** 2 + 1), "far": 1.001 / math.sqrt(4 + 1.001 ** 2)}, rel=1e-6)
    assert task.model.weight.flatten().tolist() == [0.0, 0.0]      # the probe is undone


def test_updates_only_after_warmup_every_n_steps():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(update_every=3, warmup_steps=4), seed=0)
    strat.setup(["near", "far"], [10, 10])
    updated = []
    for step in range(1, 13):
        before = strat.updates
        strat.after_step(task.ctx(step))
        if strat.updates > before:
            updated.append(step)
    assert updated == [6, 9, 12]


def test_subset_scores_only_k_collections():
    task = ToyTask(targets=(1.0, -1.0, 0.0))
    strat = InfluenceStrategy(toy_config(subset_size=2, reptile=False), seed=3)
    strat.setup(["a", "b", "c"], [5, 5, 5])
    ctx = task.ctx(1)
    ctx.collection_names = ["a", "b", "c"]
    strat.after_step(ctx)
    rec = strat.trajectory_record(1)
    # SGD look-ahead lr .5 from 0 towards 1 / -1 / 0, dev 1: I = .375, -.625, 0 (hand-computed, as above)
    full = {"a": 0.375, "b": -0.625, "c": 0.0}
    chosen = sorted(rec["rewards"])
    assert len(chosen) == 2
    assert rec["rewards"] == pytest.approx({n: full[n] for n in chosen})
    # only the chosen collections were drawn for look-aheads
    assert {["a", "b", "c"][c] for c in task.drawn if c >= 0} == set(chosen)
    # REINFORCE on S: d_k = P_k I_k - P(k|S) sum_{i in S} P_i I_i with P = 1/3, P(k|S) = 1/2:
    #   d_k = (I_k - (I_1 + I_2) / 2) / 3 -> Adam's first step: psi_k = 0.1 * sign(d_k); outside S: 0.
    i1, i2 = (full[n] for n in chosen)
    expected = {chosen[0]: 0.1 * np.sign(i1 - i2), chosen[1]: 0.1 * np.sign(i2 - i1)}
    psi = dict(zip(["a", "b", "c"], strat.scorer.psi.tolist()))
    for n in "abc":
        assert psi[n] == pytest.approx(expected.get(n, 0.0), abs=1e-6)


def test_missing_dev_sets_is_a_config_error():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    ctx = task.ctx(1)
    ctx.dev_names, ctx.draw_dev_batch = [], None
    with pytest.raises(ConfigError, match="dev"):
        strat.after_step(ctx)


def test_build_validates_options():
    from drmix.config import TrainConfig
    from drmix.mixture.registry import build_strategy

    s = build_strategy(TrainConfig(strategy="multidds", infdds={"update_every": 5}, batch_size=16, seed=1), ["a"])
    assert isinstance(s, MultiDDSStrategy) and s.config.reward == "gradcos" and s.config.dev_batch_size == 16
    assert s.config.train_batch_size == 16 and s.config.update_every == 5 and s.seed == 1
    s = build_strategy(TrainConfig(strategy="infdds", infdds={"dev_batch_size": 3}, batch_size=16), ["a"])
    assert type(s) is InfluenceStrategy and (s.config.dev_batch_size, s.config.train_batch_size) == (3, 16)
    with pytest.raises(ConfigError, match="update_every"):
        build_strategy(TrainConfig(strategy="infdds", infdds={"update_every": 0}), ["a"])
    with pytest.raises(ConfigError):
        build_strategy(TrainConfig(strategy="infdds", infdds={"no_such_option": 1}), ["a"])


def test_state_round_trip_resumes_exactly():
    def run(strat, task, steps):
        for s in steps:
            strat.after_step(task.ctx(s))
        return strat

    cfg = toy_config(subset_size=2)
    names = ["a", "b", "c"]
    task_a = ToyTask(targets=(1.0, -1.0, 0.3))
    a = InfluenceStrategy(cfg, seed=5)
    a.setup(names, [3, 5, 7])
    run(a, task_a, range(1, 4))
    state = json.loads(json.dumps(a.state_dict()))  # JSON-serialisable
    w_mid = task_a.model.weight.detach().clone()
    run(a, task_a, range(4, 7))

    task_b = ToyTask(targets=(1.0, -1.0, 0.3))
    with torch.no_grad():
        task_b.model.weight.copy_(w_mid)
    b = InfluenceStrategy(cfg, seed=5)
    b.setup(names, [3, 5, 7])
    b.load_state_dict(state)
    run(b, task_b, range(4, 7))
    assert b.scorer.psi.tolist() == a.scorer.psi.tolist()
    assert b.state_dict()["scorer"] == a.state_dict()["scorer"]
    assert task_b.drawn == task_a.drawn[len(task_a.drawn) - len(task_b.drawn):]
    assert b.final_weights()["mean_weights"] == a.final_weights()["mean_weights"]


# ---------------------------------------------------------------------------------------------------
# Tiny transformer: the policy moves towards the collection that resembles the dev set
# ---------------------------------------------------------------------------------------------------

def _pairs(rng: random.Random, vocab: list[str], n: int, related: bool) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        words = rng.sample(vocab, 4)
        if related:  # positive = the query's words shuffled plus one more
            pos = words[:]
            rng.shuffle(pos)
            pos.append(rng.choice(vocab))
        else:  # positive unrelated to the query
            pos = rng.sample(vocab, 5)
        out.append((" ".join(words), " ".join(pos)))
    return out


def test_policy_moves_towards_dev_like_collection(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    rng = random.Random(0)
    model = SentenceTransformer(tiny_model_path, device="cpu")
    vocab = ["apple", "river", "stone", "cloud", "music", "garden", "window", "summer", "paper", "silver",
             "forest", "engine", "doctor", "planet", "butter", "castle", "yellow", "winter", "market", "island"]
    data = {0: _pairs(rng, vocab, 64, related=False), 1: _pairs(rng, vocab, 64, related=True),
            -1: _pairs(rng, vocab, 64, related=True)}
    cursor = {k: 0 for k in data}

    def draw(c: int, n: int) -> Batch:
        rows = [data[c][(cursor[c] + i) % len(data[c])] for i in range(n)]
        cursor[c] += n
        return Batch([q for q, _ in rows], [p for _, p in rows], [[] for _ in rows], np.full(n, c, dtype=np.int64))

    def compute_losses(batch: Batch) -> torch.Tensor:
        q = model(model.preprocess(batch.queries))["sentence_embedding"]
        p = model(model.preprocess(batch.positives))["sentence_embedding"]
        return torch.nn.functional.cross_entropy(q @ p.T / 0.05, torch.arange(len(batch)), reduction="none")

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    cfg = InfDDSConfig(update_every=1, warmup_steps=3, lookahead_steps=2, scorer_lr=0.3,
                       train_batch_size=16, dev_batch_size=32)
    strat = InfluenceStrategy(cfg, seed=0)
    strat.setup(["random", "dev-like"], [64, 64])
    model.train()
    for step in range(1, 7):  # updates after steps 3, 4, 5, 6
        # one regular training step on the uniform mixture, then the strategy's hook
        c = step % 2
        loss = compute_losses(draw(c, 16)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ctx = StepContext(step=step, model=model, optimizer=optimizer, scheduler=None,
                          collection_names=["random", "dev-like"], collection_sizes=[64, 64],
                          compute_losses=compute_losses, draw_batch=draw, dev_names=["dev"],
                          draw_dev_batch=lambda j, n: draw(-1, n))
        strat.after_step(ctx)
    rewards = strat._last_influence["rewards"]
    assert rewards["dev-like"] > rewards["random"]
    p = strat.sampling_weights()
    assert p[1] > 0.7, p  # 4 Adam steps of 0.3 on psi in the same direction: P(dev-like) = sigmoid(2.4) = 0.92


# ---------------------------------------------------------------------------------------------------
# With the trainer: outputs, cost log, exact resume
# ---------------------------------------------------------------------------------------------------

def _write_task_data(root, seed: int = 0):
    """Two JSONL collections (unrelated pairs, dev-like pairs) and a BEIR dev set of dev-like pairs."""
    from drmix.data.beir import write_beir

    rng = random.Random(seed)
    vocab = ["apple", "river", "stone", "cloud", "music", "garden", "window", "summer", "paper", "silver",
             "forest", "engine", "doctor", "planet", "butter", "castle", "yellow", "winter", "market", "island"]
    for name, related in (("random", False), ("devlike", True)):
        rows = [{"query": q, "positive": p} for q, p in _pairs(rng, vocab, 48, related)]
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    dev = _pairs(rng, vocab, 24, related=True)
    corpus = {f"d{i}": {"title": "", "text": p} for i, (_, p) in enumerate(dev)}
    queries = {f"q{i}": q for i, (q, _) in enumerate(dev)}
    write_beir(root / "devset", corpus, queries, {"dev": {f"q{i}": {f"d{i}": 1} for i in range(len(dev))}})


def _train_config(root, tiny_model_path, out: str, **kw):
    from drmix.config import TrainConfig

    base = dict(model=tiny_model_path, data=[str(root / "random.jsonl"), str(root / "devlike.jsonl")],
                output_dir=str(root / out), max_steps=6, batch_size=8, learning_rate=3e-4, warmup_ratio=0.0,
                scheduler="constant", query_max_length=16, doc_max_length=16, num_negatives=0,
                dev=[str(root / "devset")], seed=1, save_every=2, log_every=1, show_progress=False,
                device="cpu", strategy="infdds",
                infdds={"update_every": 2, "warmup_steps": 2, "scorer_lr": 0.3, "dev_batch_size": 16})
    base.update(kw)
    return TrainConfig(**base)


def test_trainer_run_writes_trajectory_and_resumes_exactly(tmp_path, tiny_model_path):
    from drmix.api import train

    _write_task_data(tmp_path)

    def strategy(cfg):
        from drmix.mixture.registry import build_strategy

        return build_strategy(cfg, ["random", "devlike"])

    cfg = _train_config(tmp_path, tiny_model_path, "full")
    result = train(cfg, strategy=strategy(cfg))
    traj = [json.loads(line) for line in (result.output_dir / "weights.jsonl").read_text().splitlines()]
    assert [r["step"] for r in traj] == [1, 2, 4, 6]  # initial policy, then updates every 2 steps from step 2
    assert traj[0]["weights"] == {"random": 0.5, "devlike": 0.5}
    assert set(traj[-1]["rewards"]) == {"random", "devlike"}
    assert set(traj[-1]["influence_per_dev"]["devlike"]) == {"devset"}
    final = json.loads((result.output_dir / "weights.json").read_text())
    assert final["collections"] == ["random", "devlike"] and final["updates"] == 3
    assert final["weights"] == pytest.approx(list(traj[-1]["weights"].values()))
    metrics = [json.loads(line) for line in (result.output_dir / "metrics.jsonl").read_text().splitlines()]
    cost = [m for m in metrics if "lookahead_s" in m]
    assert [m["step"] for m in cost] == [2, 4, 6] and cost[-1]["lookahead_total_s"] > 0

    # a copy of the run without its final outputs, resumed from its step-4 checkpoint, replays steps 5-6 (policy,
    # scorer and lookahead state restored) into the same weights and trajectory (the resume after a kill is the
    # trainer's own test)
    from train_helpers import stopped_copy

    stopped_copy(result.output_dir, tmp_path / "resumed")
    cfg_b = _train_config(tmp_path, tiny_model_path, "resumed", resume=True,
                          resume_from=str(tmp_path / "resumed" / "checkpoints" / "step-4"))
    assert train(cfg_b, strategy=strategy(cfg_b)).steps == 6
    starts = [r["step"] for r in map(json.loads, (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines())
              if r.get("event") == "start"]
    assert starts == [0, 4]
    resumed = json.loads((tmp_path / "resumed" / "weights.json").read_text())
    assert resumed["weights"] == final["weights"]
    assert resumed["mean_weights"] == final["mean_weights"]
    traj_b = [json.loads(line) for line in (tmp_path / "resumed" / "weights.jsonl").read_text().splitlines()]
    assert [r["weights"] for r in traj_b] == [r["weights"] for r in traj]


class _HandEncoder(torch.nn.Module):
    """A stand-in SentenceTransformer: prompts, eval/train, and encode() from a table of 2-d vectors."""

    def __init__(self, table, prompts=None):
        super().__init__()
        self.table, self.prompts, self.seen = table, prompts or {}, []

    def encode(self, texts, convert_to_tensor=False, normalize_embeddings=False, show_progress_bar=None):
        # SentenceTransformer.encode's own defaults: the metric must ask for tensors, unit vectors and no bar
        assert convert_to_tensor is True and normalize_embeddings is True and show_progress_bar is False
        assert not self.training
        self.seen.append(list(texts))
        return torch.nn.functional.normalize(torch.tensor([self.table[t] for t in texts], dtype=torch.float32), dim=-1)


def test_dev_ndcg_metric_ranks_the_dev_batch_pool_with_the_models_prompts():
    """Queries (with the query prompt) rank the pool of the batch's positives then negatives (document prompt);
    query i's relevant document is positive i. q0's positive ranks 2nd behind n0 -> 1/log2(3); q1's first -> 1."""
    table = {"Q: q0": [1.0, 0.0], "Q: q1": [0.0, 1.0], "D: p0": [0.9, 0.45], "D: p1": [0.0, 1.0],
             "D: n0": [1.0, 0.05], "D: n1": [-1.0, 0.0]}
    model = _HandEncoder(table, {"query": "Q: ", "document": "D: "})
    model.train()
    batch = Batch(["q0", "q1"], ["p0", "p1"], [["n0"], ["n1"]], np.zeros(2, dtype=np.int64))
    assert dev_ndcg_metric(model, batch, k=10) == pytest.approx((1 / math.log2(3) + 1) / 2)
    assert dev_ndcg_metric(model, batch, k=1) == pytest.approx(0.5)
    assert model.seen[0] == ["Q: q0", "Q: q1"] and model.seen[1] == ["D: p0", "D: p1", "D: n0", "D: n1"]
    assert model.training                                   # eval mode only for the measurement
    table.update({"q0": [1.0, 0.0], "q1": [0.0, 1.0], "p0": [1.0, 0.0], "p1": [0.0, 1.0], "n0": [0.5, 0.5],
                  "n1": [0.5, 0.5]})
    assert dev_ndcg_metric(_HandEncoder(table, {"query": "", "passage": ""}), batch, k=10) == pytest.approx(1.0)


def test_batch_ndcg_ties_and_cutoff():
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    docs = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    # a tie with the relevant document does not push it down (strictly greater scores count)
    assert batch_ndcg(q, docs, [1], k=1) == pytest.approx(1.0)
    # rank 3 > k = 2: 0; within k = 3: 1/log2(4) = 0.5
    assert batch_ndcg(q, docs, [2], k=2) == 0.0 and batch_ndcg(q, docs, [2], k=3) == pytest.approx(0.5)
    assert isinstance(batch_ndcg(q, docs, range(1), 10), float)


def test_dev_loss_metric_is_the_negative_mean_loss_in_eval_mode():
    task = ToyTask()
    modes = []

    def losses(batch):
        modes.append(task.model.training)
        return torch.tensor([1.0, 3.0], requires_grad=True)

    task.model.train()
    assert dev_loss_metric(losses, task.model, task.batch(-1, 2)) == -2.0
    assert modes == [False] and task.model.training


def test_lookahead_weight_decay_missing_grads_and_non_adam_state():
    # AdamW with decoupled weight decay: theta <- theta * (1 - lr * wd) before the Adam step
    q = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.AdamW([q], lr=0.01, weight_decay=0.5)
    q.grad = torch.tensor([2.0])
    opt.step()
    before = q.item()
    lookahead_step([q], [torch.tensor([3.0])], lr=0.1, optimizer=opt, mode="adam")
    assert q.item() == pytest.approx(before * (1 - 0.1 * 0.5) - 0.0990807, abs=1e-5)
    # a parameter without a gradient is left as it is; one without Adam state takes an SGD step
    a, b = torch.nn.Parameter(torch.tensor([1.0])), torch.nn.Parameter(torch.tensor([1.0]))
    opt2 = torch.optim.AdamW([a, b], lr=0.01)
    lookahead_step([a, b], [None, torch.tensor([2.0])], lr=0.1, optimizer=opt2, mode="adam")
    assert a.item() == 1.0 and b.item() == pytest.approx(0.8)
    # adam mode without an optimiser, and an SGD optimiser (no moments): plain SGD
    c = torch.nn.Parameter(torch.tensor([1.0]))
    lookahead_step([c], [torch.tensor([2.0])], lr=0.1, optimizer=None, mode="adam")
    assert c.item() == pytest.approx(0.8)
    sgd = torch.optim.SGD([c], lr=0.1, momentum=0.9)
    c.grad = torch.tensor([1.0])
    sgd.step()
    before = c.item()
    lookahead_step([c], [torch.tensor([2.0])], lr=0.1, optimizer=sgd, mode="rmsprop")
    assert c.item() == pytest.approx(before - 0.2)
    from drmix.mixture.influence.lookahead import _unwrap_optimizer

    class Wrapped:
        optimizer = sgd

    assert _unwrap_optimizer(Wrapped()) is sgd and _unwrap_optimizer(sgd) is sgd
    layer = torch.nn.Linear(2, 1)
    layer.bias.requires_grad_(False)
    assert trainable_parameters(layer) == [layer.weight]


def test_delta_buffer_edges():
    saved = [torch.zeros(2)]
    empty = DeltaBuffer(saved, temperature=1.0)
    assert empty.norm == 0.0 and empty.mean()[0].tolist() == [0.0, 0.0]
    # one delta, any score: the softmax of one element is 1
    one = DeltaBuffer(saved, temperature=0.5)
    one.add([torch.tensor([2.0, 4.0])], saved, -3.0)
    assert one.mean()[0].tolist() == pytest.approx([2.0, 4.0]) and one.norm == pytest.approx(1.0)
    # a smaller score after a larger one is weighted down, not rescaled: exp((-1 - 1) / 1)
    two = DeltaBuffer(saved, temperature=1.0)
    two.add([torch.tensor([1.0, 0.0])], saved, 1.0)
    two.add([torch.tensor([0.0, 1.0])], saved, -1.0)
    w = math.exp(-2.0)
    assert two.mean()[0].tolist() == pytest.approx([1 / (1 + w), w / (1 + w)])
    assert two.max == 1.0


def test_influence_strategy_bookkeeping_records_and_outputs():
    """What weights.jsonl / weights.json / metrics.jsonl get, key by key, after two updates; the first record is
    the initial policy at step 1; the schedule; an update is skipped at learning rate 0."""
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(update_every=2, warmup_steps=2, reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 30])
    assert [strat.is_update_step(s) for s in range(1, 7)] == [False, True, False, True, False, True]
    strat.after_step(task.ctx(1))                             # no update; the record of the initial policy
    first = strat.trajectory_record(1)
    assert first["step"] == 1 and first["updates"] == 0 and first["rewards"] == {} and first["influence_per_dev"] is None
    assert first["weights"] == {"near": 0.5, "far": 0.5} and strat.trajectory_record(1) is None   # handed out once
    strat.after_step(task.ctx(2))
    rec = strat.trajectory_record(2)
    assert rec["updates"] == 1 and rec["rewards"] == pytest.approx({"near": 0.375, "far": -0.625})
    assert rec["influence_per_dev"] == {"near": {"dev": pytest.approx(0.375)}, "far": {"dev": pytest.approx(-0.625)}}
    assert set(rec) == {"step", "weights", "updates", "lookahead_s", "regular_s", "rewards", "influence_per_dev"}
    log = task.logged[-1]
    assert log["step"] == 2 and log["strategy"] == "infdds" and set(log) == {
        "step", "strategy", "lookahead_s", "lookahead_total_s", "regular_total_s", "weights", "rewards"}
    p1 = strat.sampling_weights().copy()
    strat.after_step(task.ctx(3))
    strat.after_step(task.ctx(4))
    p2 = strat.sampling_weights().copy()
    fw = strat.final_weights()
    assert fw["collections"] == ["near", "far"] and fw["updates"] == 2 and fw["reward"] == "influence"
    assert fw["weights"] == p2.tolist() and fw["final"] == dict(zip(["near", "far"], p2.tolist()))
    assert fw["mean_weights"] == pytest.approx(((p1 + p2) / 2).tolist()) and fw["strategy"] == "infdds"
    assert fw["lookahead_s"] > 0 and fw["regular_s"] >= 0
    fresh = InfluenceStrategy(toy_config(), seed=0)
    fresh.setup(["near", "far"], [10, 30])
    assert fresh.final_weights()["mean_weights"] == [0.5, 0.5]      # no update yet: the current policy
    # learning rate 0 (end of a linear decay): the look-ahead cannot move the model, the update is skipped
    zero = ToyTask(lr=0.0)
    lazy = InfluenceStrategy(toy_config(), seed=0)
    lazy.setup(["near", "far"], [10, 10])
    lazy.after_step(zero.ctx(1))
    assert lazy.updates == 0 and zero.drawn == []
    forced = InfluenceStrategy(toy_config(lookahead_lr=0.5), seed=0)     # an explicit look-ahead rate still runs
    forced.setup(["near", "far"], [10, 10])
    forced.after_step(zero.ctx(1))
    assert forced.updates == 1


def test_scorer_state_objectives_and_pretraining():
    s = Scorer(np.array([0.0, 0.5]), lr=0.1, optimizer="adam", steps=3)
    first = s.update([1.0, -1.0])
    assert first.tolist() == pytest.approx(reinforce_gradient(torch.tensor([0.0, 0.5], dtype=torch.float64),
                                                              torch.tensor([1.0, -1.0])).tolist())
    assert int(s.optimizer.state[s.psi]["step"]) == 3                 # three steps on the same rewards
    state = json.loads(json.dumps(s.state_dict()))
    t = Scorer(np.zeros(2), lr=0.1, optimizer="adam", steps=3)
    t.load_state_dict(state)
    s.update([0.2, 0.1])
    t.update([0.2, 0.1])
    assert t.psi.tolist() == s.psi.tolist()
    bare = Scorer(np.zeros(2), lr=0.1)
    bare.load_state_dict({"psi": [0.3, 0.1]})
    assert bare.psi.tolist() == [0.3, 0.1] and not bare.optimizer.state
    # the MultiDDS objective: ascent on sum_i R_i log softmax(psi)_i, gradient R - P * sum R
    m = Scorer(np.zeros(2), lr=1.0, optimizer="sgd", objective="multidds")
    d = m.update([1.0, 3.0])
    assert d.tolist() == pytest.approx([1.0 - 0.5 * 4.0, 3.0 - 0.5 * 4.0])
    assert m.psi.tolist() == pytest.approx([-1.0, 1.0])
    sub = Scorer(np.zeros(3), lr=1.0, optimizer="sgd", objective="multidds")
    assert sub.update([2.0, 2.0], subset=[0, 2]).tolist() == pytest.approx([0.0, 0.0, 0.0])
    # pretraining to a target keeps the learning rate afterwards and reaches the target
    p = Scorer(np.zeros(3), lr=1e-4)
    steps = p.pretrain(np.array([0.2, 0.3, 0.5]))
    assert steps > 10 and p.optimizer.param_groups[0]["lr"] == 1e-4
    assert ((p.probs() - np.array([0.2, 0.3, 0.5])) ** 2).mean() <= 1e-6 * 1.5
    capped = Scorer(np.zeros(3), lr=1e-4)
    assert capped.pretrain(np.array([0.2, 0.3, 0.5]), max_steps=5) == 5
    done = Scorer(np.log(np.array([0.2, 0.3, 0.5])), lr=1e-4)
    assert done.pretrain(np.array([0.2, 0.3, 0.5])) == 1             # already there: one step, as the authors


# ---------------------------------------------------------------------------------------------------
# Wiring of the strategy: options, several processes, edge cases, the diagnostics a user reads
# ---------------------------------------------------------------------------------------------------

def test_small_collections_large_scores_and_two_rewards_scaled():
    assert softmax(initial_scores([1, 3], 1.0)) == pytest.approx([0.25, 0.75])      # one example is enough
    # scores far from 0 (a long-trained policy) stay finite: softmax([1000, 999]) = [e, 1] / (e + 1)
    assert softmax(np.array([1000.0, 999.0])) == pytest.approx([0.7310586, 0.2689414], abs=1e-7)
    # two rewards 0 and 4: population std 2 -> 0, 2
    assert scale_rewards([0.0, 4.0], "std") == pytest.approx([0.0, 2.0])


def test_lookahead_steps_every_parameter_and_rmsprop_reads_the_bias_corrected_moment():
    p1, p2 = torch.nn.Parameter(torch.tensor([1.0])), torch.nn.Parameter(torch.tensor([1.0]))
    lookahead_step([p1, p2], [torch.tensor([2.0]), torch.tensor([4.0])], lr=0.1)
    assert (p1.item(), p2.item()) == pytest.approx((0.8, 0.6))
    # two AdamW steps with gradient 2 on two parameters: v = .999 * .004 + .001 * 4 = .007996, step 2,
    # v_hat = .007996 / (1 - .999^2) = 4 -> rmsprop look-ahead with gradient 3: -.1 * 3 / 2 = -.15 on both
    q1, q2 = torch.nn.Parameter(torch.tensor([1.0])), torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.AdamW([q1, q2], lr=0.01, weight_decay=0.0)
    for _ in range(2):
        q1.grad, q2.grad = torch.tensor([2.0]), torch.tensor([2.0])
        opt.step()
    b1, b2 = q1.item(), q2.item()
    lookahead_step([q1, q2], [torch.tensor([3.0]), torch.tensor([3.0])], lr=0.1, optimizer=opt, mode="rmsprop")
    assert q1.item() == pytest.approx(b1 - 0.15, abs=1e-6) and q2.item() == pytest.approx(b2 - 0.15, abs=1e-6)


class _BiasToy(ToyTask):
    """ToyTask whose model also has a trainable bias that no loss uses."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.model = torch.nn.Linear(1, 1, bias=True)
        with torch.no_grad():
            self.model.weight.zero_()
            self.model.bias.fill_(0.3)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)


def test_a_trainable_parameter_the_loss_does_not_use_is_left_alone():
    task = _BiasToy()
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    # as test_influence_update_hand_computed: I = .375 / -.625, Reptile to near's look-ahead w = .5
    assert strat.trajectory_record(1)["rewards"] == pytest.approx({"near": 0.375, "far": -0.625})
    assert task.model.weight.item() == pytest.approx(0.5) and task.model.bias.item() == pytest.approx(0.3)
    # MultiDDS's flat gradient has zeros where a parameter is unused: at w = 0 towards 1: (w - 1, 0) = (-1, 0)
    from drmix.mixture.influence.metrics import flat_grad
    task2 = _BiasToy()
    g = flat_grad(task2.losses, trainable_parameters(task2.model), task2.batch(0, 2))
    assert g.tolist() == pytest.approx([-1.0, 0.0])


def _half_mean(t, op="sum"):
    """all_reduce of two processes whose other one holds zeros: "mean" halves, "sum" keeps."""
    if op not in ("sum", "mean"):
        raise ValueError(op)
    if op == "mean":
        t.mul_(0.5)
    return t


def test_two_processes_average_lookahead_gradients_and_rewards():
    # the other process's gradients and rewards are 0: the look-ahead gradient halves, -1/2 and +1/2 at lr .5:
    # w_near = .25, w_far = -.25 -> I = .5 - .75^2/2 = .21875, .5 - 1.25^2/2 = -.28125; the rewards then average
    # with 0: .109375, -.140625. Reptile on the local influences: near only, w = .25 (gradient units, alpha/lr 1)
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    ctx = task.ctx(1)
    ctx.world_size, ctx.all_reduce = 2, _half_mean
    strat.after_step(ctx)
    assert strat.trajectory_record(1)["rewards"] == pytest.approx({"near": 0.109375, "far": -0.140625})
    assert task.model.weight.item() == pytest.approx(0.25)


def test_multidds_under_two_processes_reduces_every_gradient(monkeypatch):
    """Every gradient (train and dev) is the mean over the processes; the other process's gradient is (0, -1).
    At w = 0: near -(1, 0) -> (-.5, -.5), far -(0, 1) -> (0, -1), dev -(2, 1) -> (-1, -1):
    cos = 1 and 1/sqrt(2) (both the authors' summed-dev rule and the per-dev mean, one dev set).
    With the probe step 1 the dev gradient is taken at w' = g_reduced: near w' = (-.5, -.5), dev local
    (-2.5, -1.5) -> (-1.25, -1.25): cos 1; far w' = (0, -1), dev local (-2, -2) -> (-1, -1.5): cos 1.5/sqrt(3.25)."""
    import drmix.mixture.influence.metrics as metrics

    other = torch.tensor([0.0, -1.0])

    def reduce(t, op="sum"):
        assert op == "mean"
        return t.add_(other).mul_(0.5)

    monkeypatch.setattr(metrics, "all_reduce", reduce)
    for kw, expected in (({"gradcos": "authors"}, [1.0, 1 / math.sqrt(2)]),
                         ({"gradcos": "per_dev"}, [1.0, 1 / math.sqrt(2)]),
                         ({"gradcos": "authors", "probe_step": 1.0}, [1.0, 1.5 / math.sqrt(3.25)])):
        task = ToyTask2(targets=([1.0, 0.0], [0.0, 1.0]), dev=[2.0, 1.0])
        strat = MultiDDSStrategy(toy_config(scorer_pretrain=False, **kw), seed=0)
        strat.setup(["near", "far"], [10, 10])
        ctx = task.ctx(1)
        ctx.world_size, ctx.all_reduce = 2, lambda t, op="sum": t    # the rewards: the same on both
        strat.after_step(ctx)
        rewards = strat.trajectory_record(1)["rewards"]
        assert [rewards["near"], rewards["far"]] == pytest.approx(expected, rel=1e-6), kw


def test_multidds_reward_of_tiny_gradients_keeps_the_authors_epsilon():
    """get_grad_sim's ``/ (sqrt(|g|^2 |G|^2) + 1e-10)``: gradients of 1e-6 give 1e-12 / 1.01e-10, not cos = 1;
    with the probe step 1 the dev gradient doubles: 2e-12 / (2e-12 + 1e-10)."""
    from drmix.mixture.influence.metrics import probe_gradcos_rewards
    task = ToyTask2(targets=([1e-6, 0.0],), dev=[1e-6, 0.0])
    params = trainable_parameters(task.model)
    train, dev = [task.batch(0, 1)], [task.batch(-1, 1)]
    assert probe_gradcos_rewards(task.losses, params, train, dev, 0.0) == pytest.approx([1e-12 / (1e-12 + 1e-10)],
                                                                                        rel=1e-4)
    assert probe_gradcos_rewards(task.losses, params, train, dev, 1.0) == pytest.approx([2e-12 / (2e-12 + 1e-10)],
                                                                                        rel=1e-4)


class _ThreeParams(torch.nn.Module):
    """theta = (a [2], b [3], c [1]) concatenated; collection i has loss |theta - t_i|^2 / 2, the dev set d."""

    def __init__(self, targets, dev):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Parameter(torch.zeros(n, dtype=torch.float64)) for n in (2, 3, 1))
        self.targets = [torch.tensor(t, dtype=torch.float64) for t in targets]
        self.dev = torch.tensor(dev, dtype=torch.float64)
        self.fail_dev = False

    def losses(self, batch: Batch) -> torch.Tensor:
        theta = torch.cat([self.a, self.b, self.c])
        if self.fail_dev and batch.collection_ids[0] < 0:
            raise RuntimeError("dev batch unreadable")
        return torch.stack([((theta - (self.dev if c < 0 else self.targets[c])) ** 2).sum() / 2
                            for c in batch.collection_ids])


def test_multidds_probe_moves_each_parameter_by_its_own_gradient_and_is_undone_on_error():
    """At theta = 0: g_i = -t_i, theta' = -s t_i, dev gradient theta' - d: r_i = t_i.(s t_i + d) / (|t_i| |s t_i + d|)."""
    from drmix.mixture.influence.metrics import probe_gradcos_rewards
    targets = [[1.0, 2.0, 3.0, -1.0, 0.5, 4.0], [0.0, -2.0, 1.0, 1.0, 2.0, -3.0]]
    dev = [1.0, 0.0, -1.0, 2.0, 1.0, 1.0]
    m = _ThreeParams(targets, dev)
    batch = lambda c: Batch(["q"], ["p"], [[]], np.array([c], dtype=np.int64))  # noqa: E731
    s = 0.5
    expected = []
    for t in targets:
        t, d = np.array(t), np.array(dev)
        u = s * t + d
        expected.append(float(t @ u / (np.linalg.norm(t) * np.linalg.norm(u))))
    got = probe_gradcos_rewards(m.losses, list(m.parameters()), [batch(0), batch(1)], [batch(-1)], s)
    assert got == pytest.approx(expected, rel=1e-9)
    assert all(float(p.detach().abs().sum()) == 0.0 for p in m.parameters())             # restored after each probe
    m.fail_dev = True
    with pytest.raises(RuntimeError, match="unreadable"):
        probe_gradcos_rewards(m.losses, list(m.parameters()), [batch(0)], [batch(-1)], s)
    assert all(float(p.detach().abs().sum()) == 0.0 for p in m.parameters())             # the probe undone on the error


def test_an_error_during_a_lookahead_restores_the_model():
    task = ToyTask()
    draws = []

    def draw(c, n):
        draws.append(c)
        if len(draws) == 2:          # near's second look-ahead batch: after its first step moved w to .5
            raise RuntimeError("collection unreadable")
        return task.batch(c, n)

    strat = InfluenceStrategy(toy_config(lookahead_steps=2), seed=0)
    strat.setup(["near", "far"], [10, 10])
    ctx = task.ctx(1)
    ctx.draw_batch = draw
    with pytest.raises(RuntimeError, match="unreadable"):
        strat.after_step(ctx)
    assert task.model.weight.item() == 0.0


def test_reptile_weighted_by_the_policy():
    """reptile_weights: policy -> p = P(i | S): init_temperature 1 over sizes 10, 30 gives P = [.25, .75]; the
    look-ahead deltas .5 and -.5 -> mean -.25, alpha/lr 1 -> w = -.25."""
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(reptile_weights="policy", init_temperature=1.0, scorer_lr=1e-9), seed=0)
    strat.setup(["near", "far"], [10, 30])
    assert strat.sampling_weights().tolist() == pytest.approx([0.25, 0.75])     # the initial policy, no pretraining
    strat.after_step(task.ctx(1))
    assert task.model.weight.item() == pytest.approx(-0.25, abs=1e-6)


def test_a_non_finite_dev_measure_keeps_that_lookahead_out_of_reptile(caplog):
    """far's look-ahead model (w = -.5) is finite but its dev loss is NaN: under policy weights only near's delta
    (.5, weight P(near | S) = .5, normalised: 1) moves the model: w = .5; the policy update leaves far out."""
    task = ToyTask()
    plain = task.losses

    def losses(batch):
        out = plain(batch)
        if batch.collection_ids[0] < 0 and task.model.weight.item() < 0:
            return out * float("nan")
        return out

    task.losses = losses
    strat = InfluenceStrategy(toy_config(reptile_weights="policy"), seed=0)
    strat.setup(["near", "far"], [10, 10])
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.influence"):
        strat.after_step(task.ctx(1))
    assert task.model.weight.item() == pytest.approx(0.5)
    assert strat.sampling_weights().tolist() == pytest.approx([0.5, 0.5])
    assert any("non-finite reward" in r.message for r in caplog.records)


def test_no_warning_when_every_reward_is_finite(caplog):
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(), seed=0)
    strat.setup(["near", "far"], [10, 10])
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.influence"):
        strat.after_step(task.ctx(1))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_each_dev_set_is_drawn_and_measured():
    """Two dev sets with targets 1 and -1: near's look-ahead (w = .5) gains .375 on the first and loses .625 on
    the second; far the reverse; the reward is the mean over dev sets (-.125 each)."""
    task = ToyTask()
    devs = [1.0, -1.0]
    plain = task.losses

    def losses(batch):
        c = int(batch.collection_ids[0])
        if c >= 0:
            return plain(batch)
        w = task.model.weight.reshape(())
        return (w - devs[-c - 1]) ** 2 / 2 * torch.ones(len(batch.collection_ids))

    task.losses = losses
    strat = InfluenceStrategy(toy_config(reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 10])
    ctx = task.ctx(1)
    ctx.dev_names = ["d0", "d1"]
    ctx.draw_dev_batch = lambda j, n: task.batch(-(j + 1), n)
    strat.after_step(ctx)
    rec = strat.trajectory_record(1)
    assert rec["influence_per_dev"] == {"near": {"d0": pytest.approx(0.375), "d1": pytest.approx(-0.625)},
                                        "far": {"d0": pytest.approx(-0.625), "d1": pytest.approx(0.375)}}
    assert rec["rewards"] == pytest.approx({"near": -0.125, "far": -0.125})


def test_rewards_are_kept_in_double_precision():
    """A float64 model: SGD look-ahead lr .3 from 0 -> w = +-.3, I = .5 - .7^2/2 = .255 and .5 - 1.3^2/2 = -.345,
    recorded to 1e-12 (a float32 reward would be off by 1e-8)."""
    task = ToyTask(lr=0.3)
    task.model = torch.nn.Linear(1, 1, bias=False, dtype=torch.float64)
    with torch.no_grad():
        task.model.weight.zero_()
    task.optimizer = torch.optim.SGD(task.model.parameters(), lr=0.3)
    target = {0: 1.0, 1: -1.0, -1: 1.0}
    task.losses = lambda batch: torch.stack([(task.model.weight.reshape(()) - target[int(c)]) ** 2 / 2
                                             for c in batch.collection_ids])
    strat = InfluenceStrategy(toy_config(reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    rewards = strat.trajectory_record(1)["rewards"]
    assert rewards["near"] == pytest.approx(0.255, rel=1e-12) and rewards["far"] == pytest.approx(-0.345, rel=1e-12)


def test_scorer_optimizer_and_reward_scaling_options():
    """SGD at lr 1 on I = [.375, -.625] (P = .5 each): d = .5 (I - mean I) = [.25, -.25]; reward_scale std divides
    I by its std .5 first: d = [.5, -.5]. (Adam's first step would be +-lr = +-1 either way.)"""
    for scale, expected in (("none", [0.25, -0.25]), ("std", [0.5, -0.5])):
        task = ToyTask()
        strat = InfluenceStrategy(toy_config(scorer_optimizer="sgd", scorer_lr=1.0, reward_scale=scale,
                                             reptile=False), seed=0)
        strat.setup(["near", "far"], [10, 10])
        strat.after_step(task.ctx(1))
        assert strat.scorer.psi.tolist() == pytest.approx(expected)


def test_multidds_records_no_per_dev_influence_and_always_rewards_gradient_cosines():
    task = ToyTask2(targets=([1.0, 0.0], [0.0, 1.0]), dev=[2.0, 1.0])
    strat = MultiDDSStrategy(toy_config(scorer_pretrain=False), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(task.ctx(1))
    assert strat.trajectory_record(1)["influence_per_dev"] is None
    # MultiDDS rewards gradient cosines even when the options say influence
    assert MultiDDSStrategy(InfDDSConfig(reward="influence")).config.reward == "gradcos"


def test_subsets_are_distinct_collections_reproducible_from_the_seed():
    cfg = toy_config(subset_size=2)
    names = ["a", "b", "c"]

    def draws(strat):
        strat.setup(names, [5, 5, 5])
        return [strat.choose_subset() for _ in range(30)]

    first = draws(InfluenceStrategy(cfg, seed=7))
    assert all(len(set(s)) == 2 and s == sorted(s) for s in first)
    assert draws(InfluenceStrategy(cfg, seed=7)) == first
    # the default seed is the training config's default (42): a strategy built directly draws as the CLI's
    assert draws(InfluenceStrategy(cfg)) == draws(InfluenceStrategy(cfg, seed=42))
    assert draws(MultiDDSStrategy(cfg)) == draws(MultiDDSStrategy(cfg, seed=42))


def test_a_dev_set_name_without_a_way_to_draw_it_is_a_config_error():
    task = ToyTask()
    for names, draw in ((["dev"], None), ([], lambda j, n: task.batch(-1, n))):
        strat = InfluenceStrategy(toy_config(), seed=0)
        strat.setup(["near", "far"], [10, 10])
        ctx = task.ctx(1)
        ctx.dev_names, ctx.draw_dev_batch = names, draw
        with pytest.raises(ConfigError, match="dev set"):
            strat.after_step(ctx)


def test_batch_sizes_of_lookahead_and_dev_batches():
    """Options first, then the trainer's batch size, then 32 when the trainer does not say."""
    for opts, ctx_bs, expected in (({"train_batch_size": 3, "dev_batch_size": 5}, 8, {"train": 3, "dev": 5}),
                                   ({}, 8, {"train": 8, "dev": 8}), ({}, 0, {"train": 32, "dev": 32})):
        task = ToyTask()
        sizes = {"train": set(), "dev": set()}
        strat = InfluenceStrategy(InfDDSConfig(update_every=1, warmup_steps=0, lookahead_optimizer="sgd",
                                               reptile=False, **opts), seed=0)
        strat.setup(["near", "far"], [10, 10])
        ctx = task.ctx(1)
        ctx.batch_size = ctx_bs
        ctx.draw_batch = lambda c, n: (sizes["train"].add(n), task.batch(c, n))[1]
        ctx.draw_dev_batch = lambda j, n: (sizes["dev"].add(n), task.batch(-1, n))[1]
        strat.after_step(ctx)
        assert sizes == {k: {v} for k, v in expected.items()}, opts


def test_update_returns_the_subset_and_the_policy_it_started_from():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(init_temperature=1.0, reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 30])
    out = strat.update(task.ctx(1))
    assert out["subset"] == ["near", "far"] and out["weights_before"] == pytest.approx([0.25, 0.75])
    assert out["rewards"] == pytest.approx({"near": 0.375, "far": -0.625})


def test_trajectory_records_only_at_step_one_and_updates_also_after_a_resume():
    task = ToyTask()
    strat = InfluenceStrategy(toy_config(update_every=3, warmup_steps=4, reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 10])
    state0 = json.loads(json.dumps(strat.state_dict()))      # a checkpoint before any update
    assert state0["scorer"]["optimizer"] == {} and state0["updates"] == 0
    strat.after_step(task.ctx(1))
    assert strat.trajectory_record(1)["step"] == 1
    strat.after_step(task.ctx(2))                             # before warmup: no update, no record
    assert strat.trajectory_record(2) is None
    for s in range(3, 7):
        strat.after_step(task.ctx(s))
    assert strat.trajectory_record(6)["step"] == 6
    resumed = InfluenceStrategy(toy_config(update_every=3, warmup_steps=4, reptile=False), seed=0)
    resumed.setup(["near", "far"], [10, 10])
    resumed.load_state_dict(json.loads(json.dumps(strat.state_dict())))
    resumed.after_step(task.ctx(7))                           # not an update step: nothing to record
    assert resumed.trajectory_record(7) is None


class _Clock:
    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t


def test_lookahead_and_regular_time_in_records_logs_outputs_and_resume(monkeypatch):
    """A clock that each drawn batch advances by .0123456 s (3 draws per update) and training by 1.23456 s between
    steps: after 3 updates the look-ahead took .1111104 s and the training between them 2.46912 s."""
    import drmix.mixture.influence.strategy as strategy_mod

    clock = _Clock()
    monkeypatch.setattr(strategy_mod, "time", clock)
    task = ToyTask()
    draw = task.batch

    def timed(c, n):
        clock.t += 0.0123456
        return draw(c, n)

    task.batch = timed
    strat = InfluenceStrategy(toy_config(reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 10])
    for s in (1, 2, 3):
        strat.after_step(task.ctx(s))
        clock.t += 1.23456
    rec = strat.trajectory_record(3)
    assert rec["step"] == 3 and rec["lookahead_s"] == 0.1111 and rec["regular_s"] == 2.4691
    log_rec = task.logged[-1]
    assert (log_rec["lookahead_s"], log_rec["lookahead_total_s"], log_rec["regular_total_s"]) == (0.037, 0.111, 2.469)
    fw = strat.final_weights()
    assert fw["lookahead_s"] == pytest.approx(0.1111104) and fw["regular_s"] == pytest.approx(2.46912)
    resumed = InfluenceStrategy(toy_config(reptile=False), seed=0)
    resumed.setup(["near", "far"], [10, 10])
    resumed.load_state_dict(json.loads(json.dumps(strat.state_dict())))
    assert resumed.final_weights()["lookahead_s"] == fw["lookahead_s"]
    assert resumed.final_weights()["regular_s"] == fw["regular_s"]
    # a checkpoint written before the timings were kept resumes with both at 0
    old = {k: v for k, v in strat.state_dict().items() if k not in ("lookahead_s", "regular_s")}
    older = InfluenceStrategy(toy_config(reptile=False), seed=0)
    older.setup(["near", "far"], [10, 10])
    older.load_state_dict(old)
    assert (older.final_weights()["lookahead_s"], older.final_weights()["regular_s"]) == (0.0, 0.0)


class _SlopeEncoder(torch.nn.Module):
    """encode(): query q0 -> (1, w), passages p0 -> (0, 1), n0 -> (1, 0) (unit vectors); the training loss of
    collection i is (w - t_i)^2 / 2. q0's positive p0 outranks n0 once w > 1."""

    prompts: dict = {}

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def encode(self, texts, convert_to_tensor=False, normalize_embeddings=False, show_progress_bar=None):
        assert convert_to_tensor is True and normalize_embeddings is True and show_progress_bar is False
        w = float(self.weight)
        table = {"q0": [1.0, w], "p0": [0.0, 1.0], "n0": [1.0, 0.0]}
        return torch.nn.functional.normalize(torch.tensor([table[t] for t in texts]), dim=-1)


def test_influence_measured_by_dev_ndcg():
    """influence_metric ndcg, k 1: at w = 0 p0 ranks 2nd (nDCG@1 = 0); near (target 4) looks ahead to w = 2,
    where p0 ranks 1st: I = 1; far (target -1) to w = -.5: still 2nd, I = 0."""
    model = _SlopeEncoder()
    targets = [4.0, -1.0]

    def losses(batch):
        return torch.stack([(model.weight[0] - targets[c]) ** 2 / 2 for c in batch.collection_ids])

    def draw(c, n):
        return Batch(["q"] * n, ["p"] * n, [[] for _ in range(n)], np.full(n, c, dtype=np.int64))

    ctx = StepContext(step=1, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), scheduler=None,
                      collection_names=["near", "far"], collection_sizes=[10, 10], compute_losses=losses,
                      draw_batch=draw, dev_names=["dev"],
                      draw_dev_batch=lambda j, n: Batch(["q0"], ["p0"], [["n0"]], np.zeros(1, dtype=np.int64)),
                      log=lambda r: None)
    strat = InfluenceStrategy(toy_config(influence_metric="ndcg", ndcg_k=1, reptile=False), seed=0)
    strat.setup(["near", "far"], [10, 10])
    strat.after_step(ctx)
    assert strat.trajectory_record(1)["rewards"] == pytest.approx({"near": 1.0, "far": 0.0})
    assert model.weight.item() == 0.0


def test_actor_pretraining_reaches_the_size_proportions_in_a_few_thousand_steps():
    """pretrain_data_actor's loop (Adam at 1e-3 on the MSE to the target) gets below 1e-6 in ~1,300 steps from 0:
    a step that does not descend would run to the cap instead."""
    target = np.array([0.2, 0.3, 0.5])
    p = Scorer(np.zeros(3), lr=1e-4)
    steps = p.pretrain(target, max_steps=5000)
    assert steps < 5000 and ((p.probs() - target) ** 2).mean() <= 1e-6 * 1.5
