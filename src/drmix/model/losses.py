"""InfoNCE with hard, in-batch and cross-device negatives, returning one loss per example.

For query ``q_i`` with positive ``p_i`` and candidate set ``C_i`` (its positive, its own hard negatives
``n_{i,1..H}``, and — with in-batch negatives — every other document in the (global) batch)::

    l_i = -log( exp(s(q_i, p_i) / tau) / sum_{d in C_i} exp(s(q_i, d) / tau) )

``s`` is the inner product of the embeddings (cosine when the model normalises them). With
``in_batch=False`` the candidates are only the positive and the example's own hard negatives — the
hard-negative-only loss that tDRO measures per sample. With ``gather=True`` under
``torch.distributed``, documents from every process join the candidates through an all-gather that
keeps the gradient (``torch.distributed.nn.functional.all_gather``), so two processes with half a
batch each compute the same losses as one process with the whole batch.

Per-example losses are returned (not their mean) because mixture strategies group them by collection.
Matryoshka representation learning (DRAMA) averages the loss over truncated, re-normalised embeddings.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from drmix.device import dist_info


def gather_with_grad(t: torch.Tensor) -> torch.Tensor:
    """Concatenate ``t`` from every process along dim 0, keeping the gradient to each process's part."""
    world, _ = dist_info()
    if world == 1:
        return t
    import warnings

    from torch.distributed.nn.functional import all_gather

    with warnings.catch_warnings():  # deprecated in favour of a private API; still the public autograd gather
        warnings.simplefilter("ignore", FutureWarning)
        return torch.cat(all_gather(t.contiguous()), dim=0)


def info_nce(q: torch.Tensor, p: torch.Tensor, negs: torch.Tensor | None = None, neg_mask: torch.Tensor | None = None,
             *, temperature: float = 0.05, in_batch: bool = True, gather: bool = False) -> torch.Tensor:
    """Per-example InfoNCE loss.

    Args:
        q: queries ``[B, d]``; p: their positives ``[B, d]``.
        negs: hard negatives ``[B, H, d]`` (or None); neg_mask: ``[B, H]`` bool, True where a negative exists.
        temperature: scores are divided by it.
        in_batch: also use every other example's positive and hard negatives as negatives.
        gather: with in-batch negatives under torch.distributed, take them from all processes.
    Returns:
        ``[B]`` losses.
    """
    B = q.size(0)
    if negs is not None and negs.size(1) == 0:
        negs, neg_mask = None, None
    if negs is not None and neg_mask is None:
        neg_mask = torch.ones(negs.shape[:2], dtype=torch.bool, device=q.device)
    if not in_batch:
        pos = (q * p).sum(-1, keepdim=True)
        if negs is None:
            scores = pos
        else:
            hard = torch.einsum("bd,bhd->bh", q, negs).masked_fill(~neg_mask, float("-inf"))
            scores = torch.cat([pos, hard], dim=1)
        target = torch.zeros(B, dtype=torch.long, device=q.device)
        return F.cross_entropy(scores / temperature, target, reduction="none")

    world, rank = dist_info()
    use_gather = gather and world > 1
    all_p = gather_with_grad(p) if use_gather else p
    offset = rank * B if use_gather else 0
    docs, valid = [all_p], [torch.ones(all_p.size(0), dtype=torch.bool, device=q.device)]
    if negs is not None:
        flat = negs.reshape(-1, negs.size(-1))
        mask = neg_mask.reshape(-1)
        if use_gather:
            flat = gather_with_grad(flat)
            mask = gather_with_grad(mask.to(torch.uint8)).bool()
        docs.append(flat)
        valid.append(mask)
    docs_t = torch.cat(docs, dim=0)
    valid_t = torch.cat(valid, dim=0)
    scores = (q @ docs_t.T).masked_fill(~valid_t.unsqueeze(0), float("-inf"))
    target = torch.arange(B, device=q.device) + offset
    return F.cross_entropy(scores / temperature, target, reduction="none")


def contrastive_losses(q: torch.Tensor, p: torch.Tensor, negs: torch.Tensor | None, neg_mask: torch.Tensor | None, *,
                       temperature: float, in_batch: bool, gather: bool,
                       matryoshka_dims: list[int] | tuple[int, ...] = ()) -> torch.Tensor:
    """InfoNCE per example; with Matryoshka dims, the mean over the full and truncated embeddings."""
    losses = info_nce(q, p, negs, neg_mask, temperature=temperature, in_batch=in_batch, gather=gather)
    dims = [d for d in matryoshka_dims if d < q.size(-1)]
    if not dims:
        return losses
    total = losses
    for d in dims:
        qt = F.normalize(q[..., :d], dim=-1)
        pt = F.normalize(p[..., :d], dim=-1)
        nt = F.normalize(negs[..., :d], dim=-1) if negs is not None else None
        total = total + info_nce(qt, pt, nt, neg_mask, temperature=temperature, in_batch=in_batch, gather=gather)
    return total / (len(dims) + 1)
