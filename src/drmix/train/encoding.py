"""Batches -> model inputs for training: prompts, tokenisation, padding, the per-process slice, device copies.

One :class:`BatchEncoder` per trainer. It keeps one :class:`~drmix.train.inputs.Featurizer` per model (the
trained model, the reference model, ...), so each model is tokenised with its own tokenizer, and offers
strategies :meth:`BatchEncoder.encode_queries` (embeddings of query texts under a model, no gradient).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.device import pin_memory_available, to_device
from drmix.model.encoder import document_prompt, query_prompt
from drmix.train.inputs import Featurizer, host_inputs

Inputs = tuple[dict, dict, torch.Tensor]  # query features, document features, hard-negative mask [B, H]


class BatchEncoder:
    """Tokenises the batches of one training run (queries, positives, hard negatives) for any of its models."""

    def __init__(self, model: Any, device: torch.device, *, query_max_length: int | None,
                 doc_max_length: int | None, num_negatives: int) -> None:
        self.model = model
        self.device = device
        self.query_max_length = query_max_length
        self.doc_max_length = doc_max_length
        self.num_negatives = num_negatives
        self.q_prompt = query_prompt(model)
        self.d_prompt = document_prompt(model)
        self._featurizers: dict[int, Featurizer] = {}

    def featurizer(self, model: Any) -> Featurizer:
        if id(model) not in self._featurizers:
            cuda = pin_memory_available(self.device)  # pad to 8 for tensor cores; on CPU it only costs
            self._featurizers[id(model)] = Featurizer(model, pin=cuda, pad_multiple=8 if cuda else 1)
        return self._featurizers[id(model)]

    def negatives_in(self, batch: Batch) -> int:
        """Hard negatives per example for this global batch (same on every process)."""
        negatives = batch.tokens.negatives if batch.tokens is not None else batch.negatives  # no text read
        return min(self.num_negatives, max((len(n) for n in negatives), default=0))

    def token_ids(self, collections: list, *, num_proc: int | None = None) -> list | None:
        """Stored ids of every collection for the trained model (:mod:`drmix.data.tokenized`), or ``None``
        when its preprocessing cannot be stored or a length is unset (then batches are tokenised)."""
        from drmix.data.tokenized import tokenize_collection

        if self.query_max_length is None or self.doc_max_length is None:
            return None
        out = []
        for c in collections:
            t = tokenize_collection(c, self.model, query_max_length=self.query_max_length,
                                    doc_max_length=self.doc_max_length, query_prompt=self.q_prompt,
                                    doc_prompt=self.d_prompt, num_proc=num_proc)
            if t is None:
                return None
            out.append(t)
        return out

    def host_inputs(self, model: Any, batch: Batch, num_neg: int) -> Inputs:
        """Padded (pinned on CUDA) CPU tensors of a batch: queries, documents, negative mask; padded from the
        batch's stored ids when it has ids made for ``model`` (:func:`drmix.train.inputs.host_inputs`)."""
        return host_inputs(self.featurizer(model), batch, num_neg, query_max_length=self.query_max_length,
                           doc_max_length=self.doc_max_length, query_prompt=self.q_prompt, doc_prompt=self.d_prompt)

    def to_device(self, inputs: Inputs) -> Inputs:
        q, d, mask = inputs
        return to_device(q, self.device), to_device(d, self.device), mask.to(self.device)

    def device_inputs(self, model: Any, batch: Batch, num_neg: int) -> Inputs:
        return self.to_device(self.host_inputs(model, batch, num_neg))

    def threadable(self) -> bool:
        """True once the trained model's tokenisation may run on input threads."""
        return self.featurizer(self.model).threadable

    def encode_queries(self, texts: Sequence[str], *, model: Any = None, batch_size: int = 128) -> np.ndarray:
        """Float32 embeddings ``[n, d]`` of query texts (with the query prompt) under ``model`` (default: the
        trained one), in eval mode and without gradient; the model's train/eval mode is restored."""
        model = model if model is not None else self.model
        was = model.training
        model.eval()
        out = []
        try:
            with torch.no_grad():
                for s in range(0, len(texts), batch_size):
                    chunk = [self.q_prompt + t for t in texts[s:s + batch_size]]
                    feats = to_device(self.featurizer(model)(chunk, self.query_max_length), self.device)
                    out.append(model(feats)["sentence_embedding"].float().cpu().numpy())
        finally:
            model.train(was)
        return np.concatenate(out) if out else np.zeros((0, 1), np.float32)
