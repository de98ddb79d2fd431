"""Measurements on a model: the dev metric ``M`` of Inf-DDS (negative dev loss or in-batch nDCG@k, section 3.2)
and MultiDDS's train/dev gradient cosines. See :mod:`drmix.mixture.influence`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.device import all_reduce
from drmix.mixture.influence.lookahead import restore_parameters


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


def probe_gradcos_rewards(compute_losses, params: Sequence[torch.Tensor], train_batches: Sequence[Batch],
                          dev_batches: Sequence[Batch], probe_step: float, world_size: int = 1) -> list[float]:
    """MultiDDS's reward as its authors compute it (github.com/cindyxinyiwang/multiDDS, ``fairseq/trainer.py``,
    ``update_language_sampler``, with ``fairseq_optimizer.py``'s ``save_train_grad_t0``, ``add_grad`` and
    ``get_grad_sim``): for each training batch ``i``, its gradient ``g_i`` at ``theta``; the parameters moved to
    ``theta + probe_step * g_i``; there the dev batches' gradients *summed* (``G``, their backward passes
    accumulate); ``r_i = g_i . G / (sqrt(|g_i|^2 |G|^2) + 1e-10)``; the parameters restored. The authors'
    ``add_grad(eta=0.001)`` follows a ``zero_grad()`` that set every gradient to None and skips such parameters,
    so their probe moves nothing: ``probe_step = 0`` is their code (the strategy's default)."""
    params = list(params)
    saved = [p.detach().clone() for p in params]
    rewards = []
    fixed = None                 # without a probe the dev gradients are the same for every batch: computed once
    if probe_step == 0:
        fixed = sum(flat_grad(compute_losses, params, b, world_size) for b in dev_batches)
    try:
        for batch in train_batches:
            g = flat_grad(compute_losses, params, batch, world_size)
            if fixed is not None:
                g64, d64 = g.double(), fixed.double()
                rewards.append(float((g64 @ d64) / (torch.sqrt((g64 @ g64) * (d64 @ d64)) + 1e-10)))
                continue
            with torch.no_grad():
                offset = 0
                for p in params:
                    n = p.numel()
                    p.add_(g[offset:offset + n].view_as(p), alpha=probe_step)
                    offset += n
            dev = sum(flat_grad(compute_losses, params, b, world_size) for b in dev_batches)
            g64, d64 = g.double(), dev.double()
            rewards.append(float((g64 @ d64) / (torch.sqrt((g64 @ g64) * (d64 @ d64)) + 1e-10)))
            restore_parameters(params, saved)
    except BaseException:
        restore_parameters(params, saved)
        raise
    return rewards
