"""The two strategies, Inf-DDS (``--strategy infdds``) and MultiDDS (``--strategy multidds``), and their
registration. The algorithm and where it departs from the paper: :mod:`drmix.mixture.influence`.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.errors import ConfigError
from drmix.mixture.base import StepContext, Strategy
from drmix.mixture.influence.config import InfDDSConfig, resolved
from drmix.mixture.influence.lookahead import (_unwrap_optimizer, lookahead_step, restore_parameters,
                                               trainable_parameters)
from drmix.mixture.influence.metrics import (dev_loss_metric, dev_ndcg_metric, flat_grad, gradcos_rewards,
                                             probe_gradcos_rewards)
from drmix.mixture.influence.reptile import DeltaBuffer, reptile_update
from drmix.mixture.influence.scorer import Scorer, initial_scores, scale_rewards, softmax
from drmix.mixture.registry import StrategySpec, register_strategy
from drmix.papers import INFDDS, MULTIDDS

log = logging.getLogger(__name__)


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
        c = self.config
        psi0 = initial_scores(collection_sizes, c.init_temperature)
        self.scorer = Scorer(np.zeros_like(psi0) if c.scorer_pretrain else psi0, lr=c.scorer_lr,
                             optimizer=c.scorer_optimizer, steps=c.scorer_steps, objective=c.scorer_objective)
        if c.scorer_pretrain:     # MultiDDS: fit the actor to the initial policy (its size proportions)
            self.scorer.pretrain(softmax(psi0))
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
                              fix="use drmix.api.train.")

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
                restore_parameters(params, saved)
        except BaseException:
            restore_parameters(params, saved)
            raise
        if buffer is not None and buffer.norm > 0:
            alpha = c.reptile_alpha if c.reptile_alpha is not None else self._lr(ctx)
            # gradient units: the delta over the look-ahead step size is Algorithm 1's gradient cache
            reptile_update(params, buffer.mean(), alpha / lr if c.reptile_units == "gradient" else alpha)
        return rewards, per_dev

    def _check_dev_signal(self, ctx: StepContext, dev_batches: list[Batch], base: list[float]) -> None:
        """A loss-scored dev batch without negatives and without in-batch negatives has loss 0: an error."""
        if self.config.influence_metric != "loss":
            return
        for name, batch, b0 in zip(ctx.dev_names, dev_batches, base):
            if b0 == 0.0 and not any(batch.negatives):
                raise ConfigError(
                    f"dev set '{name}' cannot produce a non-zero loss: its batches carry no hard negatives, and "
                    "in-batch negatives are off or every other passage of the batch is the same text as the "
                    "query's positive (masked as a false negative, mask_duplicates), so the positive is the only "
                    "candidate and every influence would be 0.",
                    fix="turn in_batch_negatives on, give the dev set more distinct passages or hard negatives, "
                        "or set infdds influence_metric: ndcg.")

    def _gradcos(self, ctx: StepContext, subset: list[int], dev_batches: list[Batch], train_bs: int) -> list[float]:
        params = trainable_parameters(ctx.model)
        if self.config.gradcos == "authors":
            train_batches = [ctx.draw_batch(i, train_bs) for i in subset]
            return probe_gradcos_rewards(ctx.compute_losses, params, train_batches, dev_batches,
                                         self.config.probe_step, ctx.world_size)
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
    """MultiDDS as its authors' code runs it (:data:`~drmix.mixture.influence.config.MULTIDDS_DEFAULTS`): the reward
    ``cos(g_train_i, sum_j g_dev_j at theta + 0.001 g_train_i)``, the actor pretrained to the size proportions and
    trained by Adam at 1e-4 for 200 steps on ``-sum_i R_i log softmax(psi)_i`` every 1,000 steps."""

    name = "multidds"

    def __init__(self, config: InfDDSConfig | None = None, seed: int = 42) -> None:
        super().__init__(resolved(config or InfDDSConfig(), "multidds"), seed)


def _build(config, options: InfDDSConfig | None, names: list[str], weights: list) -> InfluenceStrategy:
    """``config.mixture.strategy`` is "infdds" or "multidds"; the training batch size fills ``train_batch_size`` /
    ``dev_batch_size`` left unset."""
    options = options or InfDDSConfig()
    batch = config.contrastive.batch_size
    options = options.model_copy(update={"train_batch_size": options.train_batch_size or batch,
                                         "dev_batch_size": options.dev_batch_size or batch})
    cls = MultiDDSStrategy if config.mixture.strategy.lower() == "multidds" else InfluenceStrategy
    return cls(options, config.optim.seed)


for _name, _paper, _text, _card in (
        ("infdds", INFDDS, "Inf-DDS: sample collections by their look-ahead influence on dev sets (--influence).",
         "learned by Inf-DDS: a sampling policy rewarded by look-ahead influence on dev sets"),
        ("multidds", MULTIDDS, "MultiDDS: sample collections by train/dev gradient similarity (--influence).",
         "learned by MultiDDS: gradient-similarity rewards against dev sets")):
    register_strategy(StrategySpec(
        name=_name, build=_build, options=InfDDSConfig, options_field="influence", family="influence", help=_text,
        paper=_paper, card_text=_card, learns_weights=True, needs_dev=True, docs="docs/influence.md"))
