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
* MultiDDS (``strategy: multidds``, ``reward="gradcos"``) as its authors' code runs it
  (github.com/cindyxinyiwang/multiDDS, ``fairseq/trainer.py`` ``update_language_sampler`` and
  ``pretrain_data_actor``; ``job_scripts/*/multidds.sh``): ``r_i = cos(g_train_i, sum_j g_dev_j)`` with gradients
  of the mean training loss of one batch of ``i`` and of the dev batches over all trainable parameters (the dev
  gradients summed; the authors' probe step ``add_grad(eta=0.001)`` follows a ``zero_grad()`` and moves nothing,
  so ``probe_step`` is 0); a bias-only actor pretrained to the size proportions, trained by Adam at 1e-4 for 200
  steps on ``-sum_i R_i log softmax(psi)_i`` every 1,000 steps (:data:`.config.MULTIDDS_DEFAULTS`).
  ``gradcos: per_dev`` is drmix's earlier reward, ``1/N sum_j cos(g_train_i, g_dev_j)``.
* REINFORCE, Algorithm 1 line 17 and section 3.3: ``d_psi = sum_{i in S} P(i) I_i grad log P(i | S)``
  with ``P(i | S) = P(i) / sum_{j in S} P(j)``.  Component-wise (see :func:`reinforce_gradient`)::

      d_psi_k = [k in S] * ( P_k I_k - P(k | S) * sum_{i in S} P_i I_i )

  which for ``S`` = all collections reduces to ``d_psi_k = P_k (I_k - sum_i P_i I_i)``. ``psi`` takes an
  ascent step with Adam (the MultiDDS scorer optimiser; the paper only says "GradientUpdate").
* Reward-weighted Reptile, Algorithm 1 lines 12-14: ``theta <- theta + alpha sum_{i in S} p_i (theta_i - theta)``
  with ``p_i = I_i / sum_j I_j`` restricted to positive influences (``reptile_weights="positive"``, the
  default: ``p_i = max(I_i, 0) / sum_j max(I_j, 0)``; no Reptile step when no influence is positive),
  and ``alpha`` = the current learning rate (the paper's ``alpha = eta_t``). The weighted delta is read in
  gradient units (``reptile_units="gradient"``: divided by the look-ahead step size), as Algorithm 1's
  "gradient cache" fed to the optimiser state: at ``alpha = eta_t`` theta moves to the reward-weighted
  average of the look-ahead models, one training step's length; ``"parameters"`` (the earlier reading)
  makes the step ``eta_t`` times a delta of about ``eta_t`` -- ~1e-5 of a step, a no-op. Memory is one
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
  because loss influences are small, so at T = 1 the softmax is all but uniform (measured in
  docs/influence.md); ``reptile_weights="policy"`` weights by ``P(i | S)``.
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
  (:func:`drmix.device.all_reduce`) so every rank keeps identical parameters and policy.

Layout: :mod:`.config` (options), :mod:`.scorer` (policy and REINFORCE), :mod:`.reptile` (Reptile buffer),
:mod:`.lookahead` (look-ahead steps), :mod:`.metrics` (dev metrics, gradient cosines), :mod:`.strategy`
(the two strategies and their registration).
"""
from drmix.mixture.influence.config import InfDDSConfig
from drmix.mixture.influence.lookahead import lookahead_step, trainable_parameters
from drmix.mixture.influence.metrics import (batch_ndcg, dev_loss_metric, dev_ndcg_metric, flat_grad,
                                             gradcos_rewards)
from drmix.mixture.influence.reptile import DeltaBuffer, reptile_update
from drmix.mixture.influence.scorer import Scorer, initial_scores, reinforce_gradient, scale_rewards, softmax
from drmix.mixture.influence.strategy import InfluenceStrategy, MultiDDSStrategy

__all__ = ["DeltaBuffer", "InfDDSConfig", "InfluenceStrategy", "MultiDDSStrategy", "Scorer", "batch_ndcg",
           "dev_loss_metric", "dev_ndcg_metric", "flat_grad", "gradcos_rewards",
           "initial_scores", "lookahead_step", "reinforce_gradient", "reptile_update", "scale_rewards", "softmax",
           "trainable_parameters"]
