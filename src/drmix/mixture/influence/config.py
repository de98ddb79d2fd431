"""Options of Inf-DDS and MultiDDS (``infdds:`` in the config, ``--infdds KEY=VALUE``)."""
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
