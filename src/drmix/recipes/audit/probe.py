"""The cheap signals measured inside the whole-mixture run: every collection's Inf-DDS influence on the dev sets
and its gradient alignment with them, at a few points of training, without changing what the run trains.

:class:`SignalProbe` is the uniform mixture (it samples and weights exactly as ``--mixture uniform``) with one
addition: after the optimiser steps in ``points`` it measures, for every collection ``i`` and ``draws`` fresh
batches of it (drawn from the trainer's auxiliary stream, never the training batches):

* **influence** (Inf-DDS, "Influence Guided Sampling for Domain Adaptation of Text Retrievers", Algorithm 1 lines
  6-11 and Sec. 3.2, with drmix's defaults of :mod:`drmix.mixture.influence`): one look-ahead step on the batch
  (the AdamW step from the trainer's moments at the current learning rate, read-only), then
  ``I_i = 1/N sum_j [M(theta_i; d_j) - M(theta; d_j)]`` over one fixed batch ``d_j`` of each dev set, ``M`` the
  negative mean InfoNCE loss; the parameters are restored;
* **gradient alignment** (MultiDDS's reward as its authors compute it: Wang et al., "Balancing Training for
  Multilingual Neural Machine Translation", ACL 2020, arXiv:2004.06748, their ``update_language_sampler``):
  ``cos(g_i, sum_j g_dev_j)`` with ``g_i`` the gradient of the batch's mean loss and ``g_dev_j`` that of dev
  batch ``j`` (:func:`drmix.mixture.influence.metrics.probe_gradcos_rewards`, at ``theta``).

Both reuse one gradient per batch. Measuring at several points of the run, not only at its end, follows TracIn
(Pruthi et al., NeurIPS 2020, arXiv:2002.08484): a training example's effect on a test loss is the sum of its
gradient products along the checkpoints of training. The torch random state is saved before and restored after
every measurement, and the parameters are restored after every look-ahead, so the run trains exactly as the
plain uniform mixture would; the measurements are checkpointed with the run (an interrupted run resumes them)
and written to ``weights.json`` under ``signals``.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import torch

from drmix.mixture.base import StepContext, Strategy
from drmix.mixture.influence.lookahead import (_unwrap_optimizer, lookahead_step, restore_parameters,
                                               trainable_parameters)
from drmix.mixture.influence.metrics import dev_loss_metric, flat_grad

log = logging.getLogger(__name__)


def probe_steps(budget: int, points: int) -> list[int]:
    """``points`` optimiser steps evenly spaced inside a run of ``budget`` steps, the last one before the final
    step (where a linear schedule's learning rate, and so every look-ahead, is 0): ``round(budget * j /
    (points + 1))`` for ``j = 1..points``, distinct and at least 1."""
    return sorted({min(max(1, round(budget * j / (points + 1))), max(budget - 1, 1)) for j in range(1, points + 1)})


class SignalProbe(Strategy):
    """Uniform sampling that measures each collection's influence and gradient alignment at ``points``."""

    name = "audit-probe"

    def __init__(self, points: list[int], draws: int = 2, *, batch_size: int | None = None,
                 dev_batch_size: int | None = None) -> None:
        self.points = sorted(set(int(p) for p in points))
        self.draws = int(draws)
        self.batch_size = batch_size
        self.dev_batch_size = dev_batch_size
        self.measured: dict[str, dict[str, list[float]]] = {"influence": {}, "gradalign": {}}
        self.done: list[int] = []

    def setup(self, collection_names: list[str], collection_sizes: list[int]) -> None:
        super().setup(collection_names, collection_sizes)
        for kind in self.measured:
            for n in collection_names:
                self.measured[kind].setdefault(n, [])

    def after_step(self, ctx: StepContext) -> None:
        if ctx.step in self.points and ctx.step not in self.done:
            if not ctx.dev_names or ctx.draw_dev_batch is None or ctx.draw_batch is None:
                from drmix.errors import ConfigError

                raise ConfigError("the audit's probe needs dev sets.", fix="pass --dev DIR (a BEIR directory with "
                                                                           "the --dev-split split).")
            state = torch.get_rng_state()
            try:
                self.measure(ctx)
            finally:
                torch.set_rng_state(state)
            self.done.append(int(ctx.step))

    def measure(self, ctx: StepContext) -> None:
        """One probe point: every collection's influence and gradient alignment on ``draws`` batches."""
        params = trainable_parameters(ctx.model)
        saved = [p.detach().clone() for p in params]
        size = self.batch_size or int(ctx.batch_size or 32)
        dev_size = self.dev_batch_size or size
        dev_batches = [ctx.draw_dev_batch(j, dev_size) for j in range(len(ctx.dev_names))]
        base = [dev_loss_metric(ctx.compute_losses, ctx.model, b) for b in dev_batches]
        dev_grad = sum(flat_grad(ctx.compute_losses, params, b, ctx.world_size) for b in dev_batches).double()
        lr = float(ctx.optimizer.param_groups[0]["lr"])
        optimizer = _unwrap_optimizer(ctx.optimizer)
        try:
            for i, name in enumerate(self.collection_names):
                for _ in range(self.draws):
                    loss = ctx.compute_losses(ctx.draw_batch(i, size)).mean()
                    grads = list(torch.autograd.grad(loss, params, allow_unused=True))
                    if ctx.world_size > 1:
                        for g in grads:
                            if g is not None:
                                ctx.all_reduce(g, "mean")
                    flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                                      for g, p in zip(grads, params)]).double()
                    cos = float((flat @ dev_grad) / (torch.sqrt((flat @ flat) * (dev_grad @ dev_grad)) + 1e-10))
                    lookahead_step(params, grads, lr, optimizer, "adam")
                    influence = float(np.mean([dev_loss_metric(ctx.compute_losses, ctx.model, b) - b0
                                               for b, b0 in zip(dev_batches, base)]))
                    restore_parameters(params, saved)
                    self.measured["gradalign"][name].append(cos)
                    self.measured["influence"][name].append(influence if math.isfinite(influence) else float("nan"))
        except BaseException:
            restore_parameters(params, saved)
            raise
        log.info("audit probe at step %d (lr %.2e): influence %s; gradient alignment %s", ctx.step, lr,
                 {n: round(float(np.mean(v[-self.draws:])), 6) for n, v in self.measured["influence"].items()},
                 {n: round(float(np.mean(v[-self.draws:])), 4) for n, v in self.measured["gradalign"].items()})

    def final_weights(self) -> dict:
        return {**super().final_weights(), "strategy": self.name,
                "signals": {"points": list(self.done), "draws": self.draws, **self.measured}}

    def state_dict(self) -> dict:
        return {"measured": self.measured, "done": list(self.done)}

    def load_state_dict(self, state: dict) -> None:
        self.measured = {k: {n: list(v) for n, v in d.items()} for k, d in state["measured"].items()}
        self.done = [int(s) for s in state.get("done", [])]
