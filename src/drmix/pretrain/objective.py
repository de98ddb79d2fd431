"""COCO's contrastive pretraining as a trainer :class:`~drmix.train.objective.Objective`.

COCO-DR ("COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and Distributionally
Robust Learning", Yu et al., EMNLP 2022, arXiv:2210.15212), Sec. 4.1, Eq. 2: two spans of one document are a
positive pair; every other span of the (global) batch is a negative (:func:`drmix.pretrain.coco.coco_losses`).
Batches are built by :class:`~drmix.pretrain.coco.SpanBuilder`; both sides are documents, so the query side takes
the document prompt; the backbone runs without dropout unless ``dropout`` (the authors' ``self.lm.eval()``).
"""
from __future__ import annotations

from typing import Any

import torch

from drmix.pretrain.coco import SpanBuilder, SpanStats, coco_losses
from drmix.train.objective import Objective


class CocoObjective(Objective):
    """Two spans of one document as a positive pair, in-batch (and cross-device) negatives."""

    name = "coco"
    documents_on_both_sides = True

    def __init__(self, *, temperature: float, cross_device: bool = True, dropout: bool = False,
                 card: dict[str, Any] | None = None, span_stats: list[SpanStats] | None = None) -> None:
        self.temperature = temperature
        self.cross_device = cross_device
        self.dropout = dropout
        self._card = dict(card or {})
        self.span_stats = list(span_stats or [])

    def builder(self, collections: list, *, seed: int, tokens: list | None) -> SpanBuilder:
        return SpanBuilder(collections, seed=seed)

    def wants_tokens(self) -> bool:
        return False   # spans are drawn from chunk lists, not from stored ids

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        # queries are the first spans, documents the second spans (SpanBuilder)
        return coco_losses(q.float(), d.float()[: q.size(0)], temperature=self.temperature,
                           gather=gather and self.cross_device)

    def card(self) -> dict[str, Any]:
        return dict(self._card)

    def details(self) -> dict[str, Any]:
        return {"span_stats": self.span_stats}
