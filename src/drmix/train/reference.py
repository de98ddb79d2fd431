"""The frozen reference model of DRO strategies (tDRO, DoReMi): its per-example losses on a training batch.

The batch being trained is scored on the training step's own device tensors when the reference tokenises
exactly as the model does (checked once, on the first such batch), so the reference costs no tokenisation
on the critical path; otherwise its inputs are built apart.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from drmix.data.batch import Batch
from drmix.train.encoding import BatchEncoder, Inputs

log = logging.getLogger(__name__)


class ReferenceScorer:
    """Per-example losses of a frozen reference model (no gradient)."""

    def __init__(self, model: Any, encoder: BatchEncoder,
                 losses: Callable[..., torch.Tensor], *, gather: bool) -> None:
        """``losses(q_emb, d_emb, mask, gather=bool, batch=Batch)`` turns embeddings into per-example losses (the
        trainer's objective); ``gather``: take in-batch negatives from every process (more than one process)."""
        self.model = model
        self.model.eval()
        self.model.requires_grad_(False)
        self.encoder = encoder
        self.losses = losses
        self.gather = gather
        # the batch being trained and its device inputs: the reference reuses them when it tokenises alike
        self.live: tuple[Batch, dict, dict, torch.Tensor] | None = None
        self.shares_inputs: bool | None = None

    @classmethod
    def load(cls, name: str, encoder: BatchEncoder, losses: Callable[..., torch.Tensor], *, gather: bool,
             trust_remote_code: bool = False, backbone: Any = None) -> "ReferenceScorer":
        """``backbone`` (:class:`drmix.model.backbone.BackboneOptions`): build the reference as the proxy is
        built (pooling, EOS, normalisation, bidirectional attention, dtype)."""
        from drmix.model.backbone import load_retriever

        model = load_retriever(name, backbone, device=str(encoder.device), trust_remote_code=trust_remote_code)
        return cls(model, encoder, losses, gather=gather)

    def set_live(self, batch: Batch, q: dict, d: dict, mask: torch.Tensor) -> None:
        """Record the batch being trained and its device inputs (copies: the model's forward adds outputs)."""
        self.live = (batch, dict(q), dict(d), mask)

    def _inputs(self, batch: Batch) -> Inputs:
        enc = self.encoder
        num_neg = enc.negatives_in(batch)
        live = self.live
        if live is None or live[0] is not batch or self.shares_inputs is False:
            return enc.device_inputs(self.model, batch, num_neg)
        _, q, d, mask = live
        if self.shares_inputs is None:
            rq, rd, rmask = enc.host_inputs(self.model, batch, num_neg)
            same = all(set(a) == set(b) and all(torch.equal(a[k].cpu(), b[k]) for k in b if torch.is_tensor(b[k]))
                       for a, b in ((q, rq), (d, rd))) and torch.equal(mask.cpu(), rmask)
            self.shares_inputs = same
            if not same:
                log.info("the reference model tokenises differently from the model: its inputs are built apart")
                return enc.to_device((rq, rd, rmask))
        return dict(q), dict(d), mask

    def __call__(self, batch: Batch) -> torch.Tensor:
        """Per-example losses of the reference model on ``batch`` (no gradient)."""
        with torch.no_grad():
            q, d, mask = self._inputs(batch)
            qe = self.model(q)["sentence_embedding"]
            de = self.model(d)["sentence_embedding"]
            return self.losses(qe, de, mask, gather=self.gather, batch=batch)
