"""GradCache: contrastive batches far larger than fit in memory, with the gradients of the whole batch.

Gao, Zhang, Han, Callan (2021), "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup" — the gradient cache the tDRO paper (AAAI 2025, arXiv:2408.10613, section on weights transfer) trains with;
COCO-DR and DRAMA train at global batches of about 2,048. A contrastive loss couples every example
of the batch (in-batch negatives), so gradient accumulation over micro-batches optimises a
*different* loss (fewer negatives); GradCache keeps the loss of the full batch. With encoder
``f_theta``, inputs split into chunks ``x_1..x_C`` and a loss ``L(r)`` of all representations ``r``:

1. ``r_c = f_theta(x_c)`` for every chunk without building a graph (memory: one chunk's activations);
2. ``L`` on the concatenated ``r`` (detached, ``requires_grad``), backward: the *representation
   gradients* ``g = dL/dr`` are cached (memory: the embeddings only);
3. per chunk, ``f_theta(x_c)`` again with a graph and back-propagate ``g_c``:
   ``dL/dtheta = sum_c (dr_c/dtheta)^T g_c`` — exactly the full-batch gradient (eq. 4-5 of the paper).

Step 3 replays each chunk's random state (dropout masks) from step 1, so the two forwards agree.
Departure: the cached backward goes through a ``backward`` callable (loss scaling under fp16, division
by accumulation steps), and re-forwards of all but the last chunk run under ``no_sync`` so DDP
all-reduces once per step. Cross-device negatives work unchanged: the loss of step 2 all-gathers the
representations with gradient, so each process's ``g`` includes the other processes' terms.

The API is a loss *of embeddings*: ``GradCache(forward, chunk_size).step(inputs, loss_fn)`` with
``forward(*chunk_inputs) -> tuple of embedding tensors`` and ``loss_fn(*embeddings) -> scalar``
(the closure can keep per-example losses for a strategy). Any contrastive loss over any number of
encoded inputs (query/document, span pairs, ...) can use it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch


def split_features(features: Any, sizes: Sequence[int]) -> list[Any]:
    """Split a feature dict (tensors along dim 0; other values shared) or a tensor into row chunks."""
    bounds = [0]
    for s in sizes:
        bounds.append(bounds[-1] + s)
    if isinstance(features, torch.Tensor):
        return [features[a:b] for a, b in zip(bounds, bounds[1:])]
    return [{k: (v[a:b] if isinstance(v, torch.Tensor) else v) for k, v in features.items()}
            for a, b in zip(bounds, bounds[1:])]


def _rows(features: Any) -> int:
    if isinstance(features, torch.Tensor):
        return features.size(0)
    return next(v.size(0) for v in features.values() if isinstance(v, torch.Tensor))


def chunk_sizes(rows: int, chunks: int) -> list[int]:
    """``rows`` split into ``chunks`` near-equal contiguous parts (the first ones one larger)."""
    base, extra = divmod(rows, chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]


class _RandomState:
    """The CPU and CUDA random state at a point, to replay a forward's dropout masks."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    @contextlib.contextmanager
    def replay(self):
        devices = list(range(len(self.cuda))) if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state_all(self.cuda)
            yield


class GradCache:
    """Full-batch gradients of a loss of embeddings, computed one chunk of inputs at a time.

    Args:
        forward: ``forward(*chunk_inputs)`` -> a tensor or tuple of tensors (the embeddings of each input).
        chunk_size: rows of the *first* input per chunk; the other inputs are cut into as many chunks.
        backward: back-propagates the scalar loss (default ``loss.backward()``; the trainer passes loss
            scaling and the division by accumulation steps).
        no_sync: context manager factory that suspends DDP gradient all-reduce (for all but the last chunk).
    """

    def __init__(self, forward: Callable[..., Any], chunk_size: int, *,
                 backward: Callable[[torch.Tensor], None] | None = None,
                 no_sync: Callable[[], contextlib.AbstractContextManager] | None = None) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.forward = forward
        self.chunk_size = chunk_size
        self.backward = backward or (lambda loss: loss.backward())
        self.no_sync = no_sync
        self._projections: list[tuple[list[tuple[torch.Tensor, ...]], list[torch.Tensor], Callable]] = []

    def project(self, vectors: Sequence[Sequence[torch.Tensor]], params: Sequence[torch.Tensor],
                done: Callable[[list[torch.Tensor], bool], None]) -> None:
        """From inside ``loss_fn``: the parameter gradients ``(dr/dparams)^T v`` of representation-gradient
        vectors ``v`` (one tuple per vector, shaped like the full embeddings) -- what back-propagating ``v``
        without the cache would give. Computed chunk by chunk during the re-forward of step 3 (``autograd.grad``
        on ``params`` only, so ``.grad`` is untouched); ``done(flat_gradients, reached)`` receives one flat
        float32 vector per ``v`` and whether any of ``params`` was reached. Used by iDRO's per-cluster gradients.
        """
        self._projections.append(([tuple(v) for v in vectors], list(params), done))

    def _run(self, chunk: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        out = self.forward(*chunk)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def step(self, inputs: Sequence[Any], loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        """Forward, loss and backward of one batch; parameter ``.grad`` is accumulated as for the whole batch.

        Returns the (detached) loss value. ``inputs``: one feature dict (or tensor) per encoded input.
        """
        rows = [_rows(x) for x in inputs]
        n_chunks = max(1, -(-rows[0] // self.chunk_size))
        chunks = list(zip(*(split_features(x, chunk_sizes(r, n_chunks)) for x, r in zip(inputs, rows))))
        # 1. representations without a graph, remembering each chunk's random state
        states, reps = [], []
        with torch.no_grad():
            for chunk in chunks:
                states.append(_RandomState())
                reps.append(self._run(chunk))
        # 2. the loss on all representations; cache d loss / d representation
        full = [torch.cat([r[j] for r in reps]).detach().requires_grad_() for j in range(len(reps[0]))]
        self._projections = []
        loss = loss_fn(*full)
        projections, self._projections = self._projections, []
        sums = [[None] * len(vecs) for vecs, _, _ in projections]
        reached = [False] * len(projections)
        self.backward(loss)
        grads = [f.grad if f.grad is not None else torch.zeros_like(f) for f in full]
        sizes = [[r[j].size(0) for r in reps] for j in range(len(full))]
        cached = list(zip(*(torch.split(g, s) for g, s in zip(grads, sizes))))
        # 3. per chunk: forward with a graph (same dropout) and back-propagate its cached gradients
        for i, (chunk, state) in enumerate(zip(chunks, states)):
            last = i == len(chunks) - 1
            sync = self.no_sync() if (self.no_sync is not None and not last) else contextlib.nullcontext()
            with sync, state.replay():
                outs = self._run(chunk)
                for p, (vecs, params, _) in enumerate(projections):
                    for n, vec in enumerate(vecs):
                        parts = [torch.split(v, s)[i].to(o.dtype) for v, s, o in zip(vec, sizes, outs)]
                        g = torch.autograd.grad(list(outs), params, parts, retain_graph=True, allow_unused=True)
                        reached[p] = reached[p] or any(x is not None for x in g)
                        flat = torch.cat([(x if x is not None else torch.zeros_like(q)).reshape(-1).float()
                                          for x, q in zip(g, params)])
                        sums[p][n] = flat if sums[p][n] is None else sums[p][n] + flat
                torch.autograd.backward(list(outs), [g.to(o.dtype) for o, g in zip(outs, cached[i])])
        for (_, _, done), flats, hit in zip(projections, sums, reached):
            done(flats, hit)
        return loss.detach()
