"""Options of Inf-DDS and MultiDDS (``infdds:`` in the config, ``--infdds KEY=VALUE``).

One options model serves both strategies; a field the user does not set takes the strategy's default: the
Inf-DDS paper's appendix A.1 for ``infdds``, the MultiDDS authors' code and script for ``multidds``
(:data:`MULTIDDS_DEFAULTS`, applied by :func:`resolved`).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class InfDDSConfig(BaseModel):
    """Options of Inf-DDS and MultiDDS (``TrainConfig.influence``). Defaults follow the paper's appendix A.1."""

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
    scorer_lr: float = Field(0.05, gt=0, description="Learning rate of the scorer psi (MultiDDS: 1e-4).")
    scorer_optimizer: Literal["adam", "sgd"] = Field("adam", description="Optimiser of psi (MultiDDS: Adam).")
    scorer_steps: int = Field(1, ge=1, description="Optimiser steps of psi per update on the same rewards "
                                                   "(MultiDDS: 200, its data_actor_optim_step).")
    scorer_objective: Literal["reinforce", "multidds"] = Field(
        "reinforce", description="reinforce: Inf-DDS's d_psi = sum_i P(i) R_i grad log P(i | S); multidds: the MultiDDS "
                                 "actor's loss -sum_i R_i log softmax(psi)_i (no P(i) factor).")
    scorer_pretrain: bool = Field(
        False, description="Start psi at 0 and fit softmax(psi) to the initial policy by Adam (lr 1e-3) on the mean "
                           "squared error until it is below 1e-6, keeping Adam's state (MultiDDS's "
                           "pretrain_data_actor); off: psi starts at the initial policy's log-probabilities.")
    gradcos: Literal["authors", "per_dev"] = Field(
        "authors", description="MultiDDS reward: authors = cos(g_train_i, sum_j g_dev_j), the dev gradients summed and "
                               "taken at theta + probe_step * g_train_i (its update_language_sampler); per_dev = "
                               "mean_j cos(g_train_i, g_dev_j) at theta (drmix's earlier rule).")
    probe_step: float = Field(
        0.0, ge=0, description="MultiDDS: the dev gradients are taken at theta + probe_step * g_train_i. The authors "
                               "call add_grad(eta=0.001) right after zero_grad() cleared every gradient, and add_grad "
                               "skips parameters without one, so their probe step never moves theta: 0 follows the "
                               "code, 0.001 the evident intent.")
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
    reptile_units: Literal["gradient", "parameters"] = Field(
        "gradient", description="gradient: the reward-weighted look-ahead delta is read as Algorithm 1's gradient "
                                "cache (divided by the look-ahead step size), so alpha = the learning rate moves "
                                "theta by one look-ahead step to the weighted average of the look-ahead models; "
                                "parameters: alpha times the delta itself (at alpha = lr, ~lr of one step).")
    reptile_weights: Literal["positive", "influence", "policy"] = Field(
        "positive", description="positive: p = max(I,0) / sum max(I,0) (Algorithm 1); influence: "
                                "p = softmax(I / reptile_temperature); policy: p = P(i | S).")
    reptile_temperature: float = Field(1.0, gt=0, description="Temperature of the softmax over influences.")

#: MultiDDS's defaults (github.com/cindyxinyiwang/multiDDS: ``fairseq/trainer.py`` ``update_language_sampler`` and
#: ``pretrain_data_actor``; ``job_scripts/*/multidds.sh``: ``--update-language-sampling 1000 --data-actor-lr 0.0001
#: --data-actor-optim-step 200 --pretrain-data-actor --pretrain-type datasize --datasize-t 1``)
MULTIDDS_DEFAULTS = {"reward": "gradcos", "update_every": 1000, "warmup_steps": 0, "init_temperature": 1.0,
                     "scorer_lr": 1e-4, "scorer_steps": 200, "scorer_objective": "multidds", "scorer_pretrain": True}


def resolved(config: InfDDSConfig, strategy: str) -> InfDDSConfig:
    """``config`` with the strategy's defaults in every field the user did not set (``multidds``:
    :data:`MULTIDDS_DEFAULTS`; ``infdds``: the field defaults)."""
    if strategy != "multidds":
        return config
    unset = {k: v for k, v in MULTIDDS_DEFAULTS.items() if k not in config.model_fields_set}
    return config.model_copy(update={**unset, "reward": "gradcos"})
