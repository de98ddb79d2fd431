"""Influence-guided dynamic data sampling (Inf-DDS) and the MultiDDS baseline.

Paper: "Influence Guided Sampling for Domain Adaptation of Text Retrievers" (Inf-DDS; an anonymous
submission under double-blind review, no arXiv id or public code): Algorithm 1, section 3.2 (influence rewards), section 3.3 (Reptile
update, subset sampling) and appendix A (hyperparameters). MultiDDS (Wang et al., 2020b) is the
gradient-similarity baseline of the same paper.

What is implemented
-------------------
* Policy, eq. (2): ``P(i; psi) = softmax(psi)_i``, initialised from collection sizes with a temperature,
  Algorithm 1 line 3: ``P(i) ∝ |D_i|^(1/tau)`` (``tau = None`` is tau = ∞, uniform).
* Influence reward, section 3.2 / Algorithm 1 lines 6-11: every ``update_every`` steps after
  ``warmup_steps``, one batch of each dev set is drawn and *kept fixed for this update* (so the
  influences of all collections are measured on the same batches and are comparable). For each
  collection ``i`` of the (sub)set ``S`` the model takes ``l = lookahead_steps`` steps on fresh
  batches of ``i`` from the current parameters ``theta``, and
  ``I_i = 1/N sum_j [M(theta_i; d_j) - M(theta; d_j)]`` with ``M`` = negative mean InfoNCE of the dev
  batch (default) or nDCG@k of the dev batch's queries against the dev batch's documents. The paper
  accumulates the per-step changes over the ``l`` steps; on a fixed dev batch that sum telescopes to
  ``M(theta_i^l) - M(theta)``, which is what is computed (one dev evaluation per collection).
* MultiDDS reward (``reward="gradcos"``): ``r_i = 1/N sum_j cos(g_train_i, g_dev_j)`` with gradients of
  the mean training loss of one batch of ``i`` and of the dev batch ``j`` over all trainable parameters.
* REINFORCE, Algorithm 1 line 17 and section 3.3: ``d_psi = sum_{i in S} P(i) I_i grad log P(i | S)``
  with ``P(i | S) = P(i) / sum_{j in S} P(j)``.  Component-wise (see :func:`reinforce_gradient`)::

      d_psi_k = [k in S] * ( P_k I_k - P(k | S) * sum_{i in S} P_i I_i )

  which for ``S`` = all collections reduces to ``d_psi_k = P_k (I_k - sum_i P_i I_i)``. ``psi`` takes an
  ascent step with Adam (the MultiDDS scorer optimiser; the paper only says "GradientUpdate").
* Reward-weighted Reptile, Algorithm 1 lines 12-14: ``theta <- theta + alpha sum_{i in S} p_i (theta_i - theta)``
  with ``p_i = I_i / sum_j I_j`` restricted to positive influences (``reptile_weights="positive"``, the
  default: ``p_i = max(I_i, 0) / sum_j max(I_j, 0)``; no Reptile step when no influence is positive),
  and ``alpha`` = the current learning rate. Memory is one
  saved copy of the trainable parameters plus one delta buffer, whatever M: after each look-ahead the
  delta ``theta_i - theta`` is folded into the buffer and ``theta`` is restored. The softmax weights
  depend on all influences, so the buffer keeps an *online softmax* (running maximum and normaliser,
  rescaled when a larger score arrives) -- written by hand because no library offers it for parameter
  lists.

Where this departs from the paper, and why
------------------------------------------
* Look-ahead optimiser. The paper steps with the training optimiser ``Step(theta_t, Opt_t)`` and keeps
  "a single copy of ... optimizer states". Here ``lookahead_optimizer="adam"`` (default) takes the step
  AdamW would take from the trainer's moments, computed in temporaries: the trainer's optimiser state is
  read, never written, so nothing has to be copied or restored. With ``l > 1`` each look-ahead step
  starts again from the trainer's moments (carrying the look-ahead's own moments would need a copy of
  them). ``"rmsprop"`` divides by the trainer's frozen second moments (no momentum) and ``"sgd"`` takes
  plain SGD steps; at typical fine-tuning rates (2e-5) plain SGD moves the model so little that the dev
  loss changes near float32 resolution.
* Reptile normalisation. Algorithm 1 divides ``sum_i I_i (theta_i - theta)`` by ``sum_i I_i``, which
  explodes or flips sign when influences are near zero or of both signs; the default keeps the paper's
  proportional weighting but over the positive part of the influences only. Section 3.3's softmax
  ``p = softmax(I / reptile_temperature)`` is ``reptile_weights="influence"``; it is *not* the default
  because loss influences are of order 1e-3, so at T = 1 the softmax is uniform to within 0.1% (measured:
  see docs/influence.md); ``reptile_weights="policy"`` weights by ``P(i | S)``.
* Non-finite influences (a look-ahead that diverged) never enter the Reptile buffer nor the policy:
  that collection is left out of the update (the REINFORCE step conditions on the finite subset); when
  no influence is finite the update is skipped with a warning.
* A dev batch with no negatives scored by the loss with in-batch negatives off has a loss of exactly 0
  (the positive is the only candidate), so no influence can be measured: that is an error naming the fix.
  The paper also feeds the Reptile delta into the optimiser state (line 16); that is not done: the
  trainer's optimiser state is never touched by the strategy.
* No reward baseline is added to REINFORCE (as in the paper; a constant baseline would not change
  ``d_psi`` anyway). Adam makes the ``psi`` step insensitive to the overall scale of the influences, but
  its first steps are close to ``scorer_lr * sign(d_psi)``, so a collection with a small positive influence
  gains as much as one with a large one; ``scorer_optimizer="sgd"`` with ``reward_scale="std"`` keeps the
  relative magnitudes and is still scale-free.
* With more than one process, look-ahead gradients and rewards are averaged across processes
  (``torch.distributed.all_reduce``) so every rank keeps identical parameters and policy.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drmix.data.batch import Batch
from drmix.device import all_reduce
from drmix.errors import ConfigError
from drmix.mixture.base import StepContext, Strategy

log = logging.getLogger(__name__)


class InfDDSConfig(BaseModel):
    """Options of Inf-DDS and MultiDDS (``TrainConfig.infdds``). Defaults follow the paper's appendix A.1."""

    model_config = ConfigDict(extra="forbid")

    reward: Literal["influence", "gradcos"] = Field(
        "influence", description="influence: Inf-DDS look-ahead influence; gradcos: MultiDDS gradient cosine.")
    update_every: int = Field(50, ge=1, description="Update the policy every N optimiser steps (paper: 50).")
    warmup_steps: int = Field(50, ge=0, description="No policy update before this step (paper: 50).")
    lookahead_steps: int = Field(1, ge=1, description="l: look-ahead steps per collection and update.")
    subset_size: int | None = Field(
        None, ge=1, description="k: score a uniform random subset of k collections per update (None = all M).")
    init_temperature: float | None = Field(
        None, gt=0, description="tau of the initial policy P(i) ∝ |D_i|^(1/tau); None = uniform (tau = ∞).")
    scorer_lr: float = Field(0.05, gt=0, description="Learning rate of the scorer psi.")
    scorer_optimizer: Literal["adam", "sgd"] = Field("adam", description="Optimiser of psi (MultiDDS: Adam).")
    reward_scale: Literal["none", "std"] = Field(
        "none", description="std: divide the rewards of an update by their standard deviation (scale-free SGD steps).")
    influence_metric: Literal["loss", "ndcg"] = Field(
        "loss", description="loss: negative InfoNCE of the dev batch; ndcg: nDCG@ndcg_k within the dev batch.")
    ndcg_k: int = Field(10, ge=1, description="k of nDCG@k for influence_metric='ndcg'.")
    train_batch_size: int | None = Field(
        None, ge=1, description="Batch size of look-ahead / gradient batches (None = the training batch size).")
    dev_batch_size: int | None = Field(
        None, ge=1, description="Batch size drawn from each dev set per update (None = the training batch size).")
    lookahead_optimizer: Literal["adam", "rmsprop", "sgd"] = Field(
        "adam", description="adam: an AdamW step from the trainer's moments (read-only); rmsprop: g / sqrt(v_hat) with "
                            "the trainer's frozen second moments; sgd: plain SGD.")
    lookahead_lr: float | None = Field(None, gt=0, description="Look-ahead step size (None = current learning rate).")
    reptile: bool = Field(True, description="Apply the reward-weighted Reptile update to the model (Inf-DDS only).")
    reptile_alpha: float | None = Field(
        None, gt=0, description="Reptile step alpha (None = the current learning rate, as in the paper).")
    reptile_weights: Literal["positive", "influence", "policy"] = Field(
        "positive", description="positive: p = max(I,0) / sum max(I,0) (Algorithm 1); influence: "
                                "p = softmax(I / reptile_temperature); policy: p = P(i | S).")
    reptile_temperature: float = Field(1.0, gt=0, description="Temperature of the softmax over influences.")


# --------------------------------------------------------------------------------------------------
# Pure parts: policy, REINFORCE gradient, scorer, Reptile buffer
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# Measurements on a model
# --------------------------------------------------------------------------------------------------

def trainable_parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


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


def _with_eval(model: torch.nn.Module):
    class _Eval:
        def __enter__(self):
            self.was_training = model.training
            model.eval()

        def __exit__(self, *exc):
            model.train(self.was_training)
    return _Eval()


def dev_loss_metric(compute_losses, model: torch.nn.Module, batch: Batch) -> float:
    """M = negative mean per-example training loss of a dev batch (eval mode, no gradient)."""
    with torch.no_grad(), _with_eval(model):
        losses = compute_losses(batch)
    return -float(losses.detach().double().mean())


def batch_ndcg(q: torch.Tensor, docs: torch.Tensor, relevant: Sequence[int], k: int) -> float:
    """Mean nDCG@k of queries ``q`` [B,d] ranking ``docs`` [D,d] with one relevant document each.

    With a single relevant document the ideal DCG is 1, so nDCG = 1/log2(1 + rank) when rank <= k.
    Written by hand: a few tensor operations, where a general evaluator would cost far more per call.
    """
    scores = q @ docs.T
    rel = torch.as_tensor(list(relevant), dtype=torch.long)
    target = scores.gather(1, rel[:, None])
    rank = 1 + (scores > target).sum(dim=1)
    gain = torch.where(rank <= k, 1.0 / torch.log2(rank.double() + 1.0), torch.zeros_like(rank, dtype=torch.float64))
    return float(gain.mean())


def dev_ndcg_metric(model, batch: Batch, k: int) -> float:
    """M = nDCG@k of the dev batch's queries over the pool of its positives and negatives."""
    from drmix.model.encoder import document_prompt, query_prompt

    docs = list(batch.positives)
    for negs in batch.negatives:
        docs.extend(negs)
    with torch.no_grad(), _with_eval(model):
        q = model.encode([query_prompt(model) + t for t in batch.queries], convert_to_tensor=True,
                         normalize_embeddings=True, show_progress_bar=False)
        d = model.encode([document_prompt(model) + t for t in docs], convert_to_tensor=True,
                         normalize_embeddings=True, show_progress_bar=False)
    return batch_ndcg(q.double().cpu(), d.double().cpu(), range(len(batch)), k)


def flat_grad(compute_losses, params: Sequence[torch.Tensor], batch: Batch, world_size: int = 1) -> torch.Tensor:
    """Gradient of the mean loss of a batch, flattened over ``params`` (zeros where unused)."""
    loss = compute_losses(batch).mean()
    grads = torch.autograd.grad(loss, list(params), allow_unused=True)
    flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])
    if world_size > 1:
        all_reduce(flat, "mean")
    return flat


def gradcos_rewards(compute_losses, params: Sequence[torch.Tensor], train_batches: Sequence[Batch],
                    dev_grads: Sequence[torch.Tensor], world_size: int = 1) -> list[float]:
    """MultiDDS reward ``r_i = mean_j cos(g_train_i, g_dev_j)`` for each training batch."""
    rewards = []
    for batch in train_batches:
        g = flat_grad(compute_losses, params, batch, world_size)
        rewards.append(float(np.mean([torch.nn.functional.cosine_similarity(g, d, dim=0).item() for d in dev_grads])))
    return rewards


# --------------------------------------------------------------------------------------------------
# The strategy
# --------------------------------------------------------------------------------------------------

class InfluenceStrategy(Strategy):
    """Inf-DDS (``reward="influence"``) or MultiDDS (``reward="gradcos"``) as a training strategy."""

    name = "infdds"

    def __init__(self, config: InfDDSConfig | None = None, seed: int = 42) -> None:
        self.config = config or InfDDSConfig()
        self.seed = seed
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 4]))
        self.scorer: Scorer | None = None
        self.updates = 0
        self.prob_sum: np.ndarray | None = None
        self.lookahead_s = 0.0
        self.regular_s = 0.0
        self._last_t: float | None = None
        self._pending: dict | None = None
        self._last_influence: dict | None = None

    @property
    def reward(self) -> str:
        return self.config.reward

    # -- Strategy hooks ---------------------------------------------------------------------------
    def setup(self, collection_names: list[str], collection_sizes: list[int]) -> None:
        super().setup(collection_names, collection_sizes)
        psi0 = initial_scores(collection_sizes, self.config.init_temperature)
        self.scorer = Scorer(psi0, lr=self.config.scorer_lr, optimizer=self.config.scorer_optimizer)
        self.prob_sum = np.zeros(len(collection_names))
        self._pending = None

    def sampling_weights(self) -> np.ndarray:
        assert self.scorer is not None, "setup() must be called first"
        return self.scorer.probs()

    def is_update_step(self, step: int) -> bool:
        c = self.config
        return step >= max(c.warmup_steps, 1) and step % c.update_every == 0

    def after_step(self, ctx: StepContext) -> None:
        now = time.perf_counter()
        if self._last_t is not None:
            self.regular_s += now - self._last_t
        if ctx.step == 1 and self.updates == 0:  # fail fast, and start the trajectory at the initial policy
            self._check_context(ctx)
            self._pending = self._record(ctx.step)
        if self.is_update_step(ctx.step) and self._can_update(ctx):
            self._check_context(ctx)
            self.update(ctx)
            spent = time.perf_counter() - now
            self.lookahead_s += spent
            self._pending = self._record(ctx.step)
            ctx.log({"step": ctx.step, "strategy": self.name, "lookahead_s": round(spent, 4),
                     "lookahead_total_s": round(self.lookahead_s, 3), "regular_total_s": round(self.regular_s, 3),
                     "weights": self._pending["weights"],
                     "rewards": self._pending["rewards"]})
        self._last_t = time.perf_counter()

    def trajectory_record(self, step: int) -> dict | None:
        rec, self._pending = self._pending, None
        return rec

    def final_weights(self) -> dict:
        p = self.sampling_weights()
        mean = self.prob_sum / self.updates if self.updates else p
        return {"collections": self.collection_names, "weights": p.tolist(),
                "final": dict(zip(self.collection_names, p.tolist())), "mean_weights": mean.tolist(),
                "strategy": self.name, "reward": self.reward, "updates": self.updates,
                "lookahead_s": self.lookahead_s, "regular_s": self.regular_s}

    def state_dict(self) -> dict:
        assert self.scorer is not None
        return {"scorer": self.scorer.state_dict(), "rng": self.rng.bit_generator.state, "updates": self.updates,
                "prob_sum": self.prob_sum.tolist(), "lookahead_s": self.lookahead_s, "regular_s": self.regular_s}

    def load_state_dict(self, state: dict) -> None:
        assert self.scorer is not None, "setup() must be called before load_state_dict()"
        self.scorer.load_state_dict(state["scorer"])
        self.rng.bit_generator.state = state["rng"]
        self.updates = int(state["updates"])
        self.prob_sum = np.asarray(state["prob_sum"], dtype=np.float64)
        self.lookahead_s = float(state.get("lookahead_s", 0.0))
        self.regular_s = float(state.get("regular_s", 0.0))

    # -- the update -------------------------------------------------------------------------------
    def _can_update(self, ctx: StepContext) -> bool:
        """False when look-ahead steps cannot move the model (learning rate 0, e.g. at the end of a linear decay)."""
        if self.reward != "influence" or self.config.lookahead_lr is not None or ctx.optimizer is None:
            return True
        if self._lr(ctx) > 0:
            return True
        log.info("%s: learning rate is 0 at step %d, policy update skipped", self.name, ctx.step)
        return False

    def _check_context(self, ctx: StepContext) -> None:
        if not ctx.dev_names or ctx.draw_dev_batch is None:
            raise ConfigError(f"strategy '{self.name}' needs at least one dev set.",
                              fix="pass --dev DIR (a BEIR directory with a dev split), or set `dev:` in the config.")
        if ctx.draw_batch is None:
            raise ConfigError(f"strategy '{self.name}' needs a trainer that can draw batches per collection.",
                              fix="use drmix.train.trainer.train.")

    def choose_subset(self) -> list[int]:
        m = len(self.collection_names)
        k = self.config.subset_size
        if k is None or k >= m:
            return list(range(m))
        return sorted(int(i) for i in self.rng.choice(m, size=k, replace=False))

    def _batch_sizes(self, ctx: StepContext) -> tuple[int, int]:
        default = int(ctx.batch_size or 32)
        return (self.config.train_batch_size or default, self.config.dev_batch_size or default)

    def update(self, ctx: StepContext) -> dict:
        """Measure rewards for a subset of collections, update psi (and theta with Reptile); return the rewards."""
        assert self.scorer is not None
        subset = self.choose_subset()
        train_bs, dev_bs = self._batch_sizes(ctx)
        dev_batches = [ctx.draw_dev_batch(j, dev_bs) for j in range(len(ctx.dev_names))]
        if self.reward == "gradcos":
            per_dev = None
            rewards = self._gradcos(ctx, subset, dev_batches, train_bs)
        else:
            rewards, per_dev = self._influence(ctx, subset, dev_batches, train_bs)
        reward_t = torch.tensor(rewards, dtype=torch.float64)
        if ctx.world_size > 1:  # identical on every rank already; keeps policies in lockstep
            ctx.all_reduce(reward_t, "mean")
        rewards = reward_t.tolist()
        p_before = self.scorer.probs()
        ok = [pos for pos, r in enumerate(rewards) if math.isfinite(r)]
        if len(ok) < len(rewards):
            log.warning("%s: non-finite reward for %s at step %d; left out of the policy update", self.name,
                        [self.collection_names[subset[p]] for p in range(len(subset)) if p not in ok], ctx.step)
        if ok:
            fsub = [subset[p] for p in ok]
            cond = None if len(fsub) == len(self.collection_names) else fsub
            self.scorer.update(scale_rewards([rewards[p] for p in ok], self.config.reward_scale), cond)
        self.updates += 1
        self.prob_sum += self.scorer.probs()
        names = [self.collection_names[i] for i in subset]
        self._last_influence = {"rewards": dict(zip(names, rewards)), "subset": names, "per_dev": per_dev,
                                "weights_before": p_before.tolist()}
        log.info("%s update %d at step %d: rewards %s -> weights %s", self.name, self.updates, ctx.step,
                 {n: round(r, 6) for n, r in zip(names, rewards)}, np.round(self.scorer.probs(), 4).tolist())
        return self._last_influence

    def _lr(self, ctx: StepContext) -> float:
        return float(ctx.optimizer.param_groups[0]["lr"])

    def _metric(self, ctx: StepContext, batch: Batch) -> float:
        if self.config.influence_metric == "ndcg":
            return dev_ndcg_metric(ctx.model, batch, self.config.ndcg_k)
        return dev_loss_metric(ctx.compute_losses, ctx.model, batch)

    def _influence(self, ctx: StepContext, subset: list[int], dev_batches: list[Batch], train_bs: int):
        c = self.config
        params = trainable_parameters(ctx.model)
        saved = [p.detach().clone() for p in params]
        lr = c.lookahead_lr or self._lr(ctx)
        base = [self._metric(ctx, b) for b in dev_batches]
        use_reptile = c.reptile and self.reward == "influence"
        self._check_dev_signal(ctx, dev_batches, base)
        temperature = c.reptile_temperature if c.reptile_weights == "influence" else None
        buffer = DeltaBuffer(saved, temperature) if use_reptile else None
        p_full = self.scorer.probs()
        p_cond = p_full[subset] / p_full[subset].sum()
        rewards: list[float] = []
        per_dev: dict[str, dict[str, float]] = {}
        try:
            for pos, i in enumerate(subset):
                for _ in range(c.lookahead_steps):
                    batch = ctx.draw_batch(i, train_bs)
                    loss = ctx.compute_losses(batch).mean()
                    grads = list(torch.autograd.grad(loss, params, allow_unused=True))
                    if ctx.world_size > 1:
                        for g in grads:
                            if g is not None:
                                ctx.all_reduce(g, "mean")
                    lookahead_step(params, grads, lr, _unwrap_optimizer(ctx.optimizer), c.lookahead_optimizer)
                changes = [self._metric(ctx, b) - b0 for b, b0 in zip(dev_batches, base)]
                influence = float(np.mean(changes))
                rewards.append(influence)
                per_dev[self.collection_names[i]] = dict(zip(ctx.dev_names, changes))
                finite = math.isfinite(influence) and all(
                    bool(torch.isfinite(p).all()) for p in params) if buffer is not None else True
                if buffer is not None and finite:
                    if c.reptile_weights == "positive":
                        if influence > 0:
                            buffer.add(params, saved, influence)
                    else:
                        buffer.add(params, saved, influence if c.reptile_weights == "influence" else float(p_cond[pos]))
                with torch.no_grad():
                    for p, s in zip(params, saved):
                        p.copy_(s)
        except BaseException:
            with torch.no_grad():
                for p, s in zip(params, saved):
                    p.copy_(s)
            raise
        if buffer is not None and buffer.norm > 0:
            alpha = c.reptile_alpha if c.reptile_alpha is not None else self._lr(ctx)
            reptile_update(params, buffer.mean(), alpha)
        return rewards, per_dev

    def _check_dev_signal(self, ctx: StepContext, dev_batches: list[Batch], base: list[float]) -> None:
        """A loss-scored dev batch without negatives and without in-batch negatives has loss 0: an error."""
        if self.config.influence_metric != "loss":
            return
        for name, batch, b0 in zip(ctx.dev_names, dev_batches, base):
            if b0 == 0.0 and not any(batch.negatives):
                raise ConfigError(
                    f"dev set '{name}' cannot produce a non-zero loss: its batches carry no negatives and in-batch "
                    "negatives are off, so the positive is the only candidate and every influence would be 0.",
                    fix="turn in_batch_negatives on, or set infdds influence_metric: ndcg, or give the dev "
                        "examples hard negatives.")

    def _gradcos(self, ctx: StepContext, subset: list[int], dev_batches: list[Batch], train_bs: int) -> list[float]:
        params = trainable_parameters(ctx.model)
        dev_grads = [flat_grad(ctx.compute_losses, params, b, ctx.world_size) for b in dev_batches]
        train_batches = [ctx.draw_batch(i, train_bs) for i in subset]
        return gradcos_rewards(ctx.compute_losses, params, train_batches, dev_grads, ctx.world_size)

    def _record(self, step: int) -> dict:
        rec: dict[str, Any] = {"step": step, "weights": dict(zip(self.collection_names, self.sampling_weights().tolist())),
                               "updates": self.updates,
                               "lookahead_s": round(self.lookahead_s, 4), "regular_s": round(self.regular_s, 4)}
        info = self._last_influence if self.updates else None
        rec["rewards"] = info["rewards"] if info else {}
        rec["influence_per_dev"] = info["per_dev"] if info else None
        return rec


class MultiDDSStrategy(InfluenceStrategy):
    """MultiDDS: the same scorer and REINFORCE update, rewarded by train/dev gradient cosine similarity."""

    name = "multidds"

    def __init__(self, config: InfDDSConfig | None = None, seed: int = 42) -> None:
        config = (config or InfDDSConfig()).model_copy(update={"reward": "gradcos"})
        super().__init__(config, seed)


def build_influence_strategy(strategy: str, options: dict[str, Any] | InfDDSConfig | None, seed: int,
                             batch_size: int | None = None) -> InfluenceStrategy:
    """Registry helper: ``strategy`` is "infdds" or "multidds"; ``options`` is ``TrainConfig.infdds``.

    ``batch_size`` (the training batch size) fills ``train_batch_size`` / ``dev_batch_size`` left unset.
    """
    try:
        config = options if isinstance(options, InfDDSConfig) else InfDDSConfig.model_validate(options or {})
    except ValidationError as e:
        msg = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"invalid infdds options: {msg}.",
                          fix="see docs/influence.md for the options of the `infdds:` block.") from None
    if batch_size is not None:
        config = config.model_copy(update={"train_batch_size": config.train_batch_size or batch_size,
                                           "dev_batch_size": config.dev_batch_size or batch_size})
    if strategy == "multidds":
        return MultiDDSStrategy(config, seed)
    if strategy == "infdds":
        return InfluenceStrategy(config, seed)
    raise ConfigError(f"unknown influence strategy '{strategy}'.", fix="use infdds or multidds.")
