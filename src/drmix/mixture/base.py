"""The Strategy interface: the pluggable part of training that decides the data mixture.

A strategy (a) gives the sampling weights over training collections before each batch is drawn,
(b) turns the per-example loss vector of a batch into the scalar that is back-propagated, and
(c) updates itself after each optimiser step (a DRO weight update, an influence look-ahead, ...).
The trainer knows nothing of any one algorithm: it calls these hooks and checkpoints
``state_dict()`` with everything else, so every strategy resumes exactly.

Static sampling, GroupDRO, DoReMi and tDRO differ only in the measurement and the update rule;
Inf-DDS runs look-ahead steps every few steps. All of them are :class:`Strategy` subclasses.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.device import all_reduce


@dataclass
class StepContext:
    """What a strategy may use during training (built by the trainer, refreshed each step).

    Attributes:
        step: number of optimiser steps completed so far (1 after the first update).
        model: the (unwrapped) SentenceTransformer being trained.
        optimizer, scheduler: the trainer's optimiser and LR scheduler.
        collection_names: names of the training collections, in index order.
        collection_sizes: number of examples in each training collection.
        compute_losses: per-example training losses of a batch under the current model (with gradient).
        reference_losses: per-example losses of the frozen reference model (no gradient), or None.
        draw_batch: ``draw_batch(collection_index, size)`` -> a fresh batch from one training collection,
            from a random stream separate from the main sampler.
        dev_names: names of the dev sets (BEIR dev splits turned into query/positive pairs).
        draw_dev_batch: ``draw_dev_batch(dev_index, size)`` -> a batch from one dev set, or None.
        log: ``log(record)`` appends a record to the run's metrics log.
        world_size, rank: distributed setting (1, 0 on a single process).
        device: the device the model trains on.
        batch_size: the global batch size of one micro-step (0 when unknown).
        micro_step, accumulation_steps: the micro-batch being trained within the optimiser step (0-based)
            and how many micro-batches one optimiser step accumulates (1: no accumulation).
        encode_queries: ``encode_queries(texts, batch_size=128)`` -> float32 numpy embeddings ``[n, d]`` of
            query texts (with the model's query prompt) under the current model, in eval mode, no gradient.
        training_queries: ``training_queries()`` -> every training query as the model sees it (formatted
            by its collection), in collection order.
        all_reduce: ``all_reduce(tensor_or_array, op="sum"|"mean")`` over the processes, the identity on one
            (:func:`drmix.device.all_reduce`); strategies reduce through it and nothing else.
        embeddings: during :meth:`Strategy.loss`, the ``(query, document)`` embeddings the losses were
            computed from (detached copies under GradCache), for gradients through the representations.
        grad_cache: the :class:`~drmix.train.gradcache.GradCache` of the step (``--grad-cache-chunk``), or
            None; its ``project`` turns representation gradients into parameter gradients.

    The context is all a strategy sees of the trainer: there is no back door to the trainer's internals.
    """

    step: int
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    collection_names: list[str]
    collection_sizes: list[int]
    compute_losses: Callable[[Batch], torch.Tensor]
    reference_losses: Callable[[Batch], torch.Tensor] | None = None
    draw_batch: Callable[[int, int], Batch] | None = None
    dev_names: list[str] = field(default_factory=list)
    draw_dev_batch: Callable[[int, int], Batch] | None = None
    log: Callable[[dict], None] = lambda record: None
    world_size: int = 1
    rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    batch_size: int = 0
    micro_step: int = 0
    accumulation_steps: int = 1
    encode_queries: Callable[..., np.ndarray] | None = None
    training_queries: Callable[[], Sequence[str]] | None = None
    all_reduce: Callable[..., Any] = all_reduce
    embeddings: tuple[torch.Tensor, torch.Tensor] | None = None
    grad_cache: Any = None


class Strategy:
    """Base class. Subclasses override what they need; the defaults are uniform static sampling."""

    name = "base"

    def setup(self, collection_names: list[str], collection_sizes: list[int]) -> None:
        """Called once by the trainer before the first step (and before ``load_state_dict`` on resume)."""
        self.collection_names = list(collection_names)
        self.collection_sizes = list(collection_sizes)

    def sampling_weights(self) -> np.ndarray:
        """Probability of each collection for the next batch (sums to 1)."""
        n = len(self.collection_names)
        return np.full(n, 1.0 / n)

    @property
    def weight_names(self) -> list[str]:
        """Names of what the weights of ``weights.jsonl`` weigh: the collections (iDRO: its clusters)."""
        return self.collection_names

    def loss(self, losses: torch.Tensor, batch: Batch, ctx: StepContext) -> torch.Tensor:
        """Scalar to back-propagate from the per-example losses of this rank's slice of the batch."""
        return losses.mean()

    def after_step(self, ctx: StepContext) -> None:
        """Called after each optimiser step."""

    def trajectory_record(self, step: int) -> dict | None:
        """A line for ``weights.jsonl`` after this step, or None to write nothing."""
        return None

    def final_weights(self) -> dict:
        """What goes into ``weights.json`` at the end of training."""
        return {"strategy": self.name, "collections": self.collection_names,
                "weights": self.sampling_weights().tolist()}

    def state_dict(self) -> dict:
        """Everything needed to resume exactly (JSON-serialisable values, numpy arrays or tensors)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`."""
