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

**False negatives.** ``exclude`` (``[B, C]`` bool, in the layout of ``C_i`` below) drops candidates from the
softmax denominator -- never the example's own positive. :func:`false_negative_mask` builds it from hashes of
the texts (or stored token ids) of a batch: a candidate equal to the example's positive, and the positive of
another example with the same query, are not negatives (sentence-transformers' ``BatchSamplers.NO_DUPLICATES``
keeps such rows out of one batch instead; drmix masks them, :mod:`drmix.data.sampling` can also keep them out).
Candidate layout: with in-batch negatives, every positive of the batch (of every process when gathered) in
order, then every example's ``H`` hard-negative slots in order; without, the example's positive then its own
``H`` negatives. With ``exclude=None`` the computation is exactly the one without masking.
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


def _keep_target(exclude: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``exclude`` with each example's target column cleared (a positive is never masked)."""
    out = exclude.to(device=target.device, dtype=torch.bool).clone()
    out[torch.arange(out.size(0), device=target.device), target] = False
    return out


def _check_tensors(**given: object) -> None:
    for name, value in given.items():
        if value is not None and not isinstance(value, torch.Tensor):
            from drmix.errors import wrong_argument

            raise wrong_argument("info_nce", name, value, "a torch.Tensor" + ("" if name in ("q", "p") else " or None"),
                                 fix="pass embeddings as tensors: torch.as_tensor(...) or model.encode(..., "
                                     "convert_to_tensor=True).")


def info_nce(q: torch.Tensor, p: torch.Tensor, negs: torch.Tensor | None = None, neg_mask: torch.Tensor | None = None,
             *, temperature: float = 0.05, in_batch: bool = True, gather: bool = False,
             exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Per-example InfoNCE loss.

    Args:
        q: queries ``[B, d]``; p: their positives ``[B, d]``.
        negs: hard negatives ``[B, H, d]`` (or None); neg_mask: ``[B, H]`` bool, True where a negative exists.
        temperature: scores are divided by it.
        in_batch: also use every other example's positive and hard negatives as negatives.
        gather: with in-batch negatives under torch.distributed, take them from all processes.
        exclude: ``[B, C]`` bool, True for candidates that are not negatives of the example (false negatives;
            see the module docstring for the layout); None: none excluded.
    Returns:
        ``[B]`` losses.
    """
    _check_tensors(q=q, p=p, negs=negs, neg_mask=neg_mask, exclude=exclude)
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
        if exclude is not None:
            scores = scores.masked_fill(_keep_target(exclude, target), float("-inf"))
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
    if exclude is not None:
        scores = scores.masked_fill(_keep_target(exclude, target), float("-inf"))
    return F.cross_entropy(scores / temperature, target, reduction="none")


def contrastive_losses(q: torch.Tensor, p: torch.Tensor, negs: torch.Tensor | None, neg_mask: torch.Tensor | None, *,
                       temperature: float, in_batch: bool, gather: bool,
                       matryoshka_dims: list[int] | tuple[int, ...] = (),
                       exclude: torch.Tensor | None = None) -> torch.Tensor:
    """InfoNCE per example; with Matryoshka dims, the mean over the full and truncated embeddings. ``exclude``:
    the false negatives of :func:`info_nce` (the same at every size)."""
    losses = info_nce(q, p, negs, neg_mask, temperature=temperature, in_batch=in_batch, gather=gather,
                      exclude=exclude)
    dims = [d for d in matryoshka_dims if d < q.size(-1)]
    if not dims:
        return losses
    total = losses
    for d in dims:
        qt = F.normalize(q[..., :d], dim=-1)
        pt = F.normalize(p[..., :d], dim=-1)
        nt = F.normalize(negs[..., :d], dim=-1) if negs is not None else None
        total = total + info_nce(qt, pt, nt, neg_mask, temperature=temperature, in_batch=in_batch, gather=gather,
                                 exclude=exclude)
    return total / (len(dims) + 1)


def false_negative_mask(query_keys: torch.Tensor, positive_keys: torch.Tensor, negative_keys: torch.Tensor,
                        negative_valid: torch.Tensor, rows: tuple[int, int], *, in_batch: bool,
                        gathered: bool) -> torch.Tensor:
    """The ``exclude`` mask of :func:`info_nce` for examples ``rows = (start, stop)`` of a global batch.

    Args:
        query_keys, positive_keys: ``[G]`` int64 hashes of each example's query and positive (the whole global
            batch, as every process draws it).
        negative_keys, negative_valid: ``[G, H]`` hashes of each example's hard-negative slots and whether the
            slot holds a negative.
        rows: this process's examples of the global batch.
        in_batch: the loss uses in-batch negatives (candidates of every example) or only the example's own.
        gathered: the in-batch candidates are the whole global batch (cross-device), not only ``rows``.
    Returns:
        ``[stop - start, C]`` bool: True where a candidate has the text of the example's positive, or is the
        positive of another example with the same query. The example's own positive is never True.
    """
    start, stop = rows
    pk, qk = positive_keys[start:stop], query_keys[start:stop]
    if not in_batch:
        own = (negative_keys[start:stop] == pk[:, None]) & negative_valid[start:stop]
        return torch.cat([torch.zeros_like(pk, dtype=torch.bool)[:, None], own], dim=1)
    lo, hi = (0, positive_keys.size(0)) if gathered else (start, stop)
    cand_pos, cand_q = positive_keys[lo:hi], query_keys[lo:hi]
    same_pos = cand_pos[None, :] == pk[:, None]
    same_query = cand_q[None, :] == qk[:, None]
    on_negs = (negative_keys[lo:hi].reshape(-1)[None, :] == pk[:, None]) & negative_valid[lo:hi].reshape(-1)[None, :]
    exclude = torch.cat([same_pos | same_query, on_negs], dim=1)
    own = torch.arange(stop - start, device=exclude.device) + (start - lo)
    exclude[torch.arange(stop - start, device=exclude.device), own] = False
    return exclude
