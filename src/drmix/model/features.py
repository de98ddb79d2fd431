"""Texts -> model features, tokenising each text once: the shared tokenisation of encoding and training.

:class:`TextBatcher` is used by :func:`drmix.retrieval.encode.encode_texts` (length-sorted inference) and by
:class:`drmix.train.inputs.Featurizer` (training batches). Hand-written: sentence-transformers' ``preprocess``
tokenises a batch through transformers' per-element tensor conversion, and a length sort needs the token
counts first, so it would tokenise every text twice.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class TextBatcher:
    """Turns a chunk of texts into length-sorted model features, tokenising each text once.

    The chunk is tokenised in one call (no padding) to get token lengths; each batch is then padded
    from those ids instead of being tokenised again by ``model.preprocess``. The first batch is also
    built by ``model.preprocess`` and compared key by key: if the two differ in anything (a tokenizer
    that pads on the left, a module that adds inputs, a chat template), every batch goes through
    ``model.preprocess`` instead, so the shortcut never changes what the model sees.

    ``pad_multiple`` rounds the padded width up (8 suits tensor cores; attention masks the extra
    columns, so embeddings do not change); the check against ``preprocess`` is made at the unrounded
    width. ``tokenizer`` replaces the model's (a private copy per thread: a fast tokenizer's
    truncation settings are shared state, so two threads must not call one tokenizer at once).
    """

    def __init__(self, model: Any, prompt: str, max_length: int | None, *, pad_multiple: int = 1,
                 tokenizer: Any = None) -> None:
        self.model = model
        self.prompt = prompt
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        self.tokenizer = tokenizer if callable(tokenizer) and getattr(tokenizer, "is_fast", False) else None
        self.limit = max_length or getattr(model, "max_seq_length", None)
        self.pad_multiple = max(1, int(pad_multiple))
        self.kwargs: dict[str, Any] = {}
        if max_length is not None:
            self.kwargs["processing_kwargs"] = {"text": {"max_length": int(max_length), "truncation": True}}
        self.fast: bool | None = None if self.tokenizer is not None else False
        self.extras: dict[str, Any] = {}

    def tokenize(self, texts: Sequence[str]) -> list[list[int]] | None:
        if self.tokenizer is None or self.fast is False:
            return None
        kwargs: dict[str, Any] = {"add_special_tokens": True, "return_attention_mask": False,
                                  "return_token_type_ids": False}
        if self.limit:
            kwargs.update(truncation=True, max_length=int(self.limit))
        return self.tokenizer([self.prompt + t for t in texts], **kwargs)["input_ids"]

    def _pad(self, ids: list[list[int]], keys: Sequence[str], multiple: int = 1) -> dict[str, Any]:
        """Right-pad ``ids`` into int64 tensors in one vectorised scatter (no per-element Python path)."""
        import itertools

        import torch

        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        width = int(lengths.max()) if len(ids) else 0
        width = -(-width // multiple) * multiple
        mask = np.arange(width)[None, :] < lengths[:, None]
        input_ids = np.full((len(ids), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        if len(ids) and isinstance(ids[0], np.ndarray):  # stored ids (drmix.data.tokenized): one concatenation
            input_ids[mask] = np.concatenate(ids) if len(ids) > 1 else ids[0]
        else:
            input_ids[mask] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                                          count=int(lengths.sum()))
        features: dict[str, Any] = {"input_ids": torch.from_numpy(input_ids),
                                    "attention_mask": torch.from_numpy(mask.astype(np.int64))}
        if "token_type_ids" in keys:
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        return features

    def padded(self, ids: Sequence[Any]) -> dict[str, Any]:
        """Features of already-tokenised ids once the shortcut is verified (what :meth:`features` returns)."""
        if not self.fast:
            raise RuntimeError("padded() needs the shortcut verified against model.preprocess first")
        return {**self._pad(list(ids), self.extras["_keys"], self.pad_multiple),
                **{k: v for k, v in self.extras.items() if k != "_keys"}}

    def features(self, texts: Sequence[str], ids: list[list[int]] | None, *, verify: bool = False) -> dict[str, Any]:
        """Features of one batch; ``verify`` (or the first call) also checks the shortcut against preprocess."""
        if ids is None or self.fast is False:
            return self.model.preprocess(list(texts), prompt=self.prompt or None, **self.kwargs)
        if self.fast and not verify:
            return {**self._pad(ids, self.extras["_keys"], self.pad_multiple),
                    **{k: v for k, v in self.extras.items() if k != "_keys"}}
        reference = self.model.preprocess(list(texts), prompt=self.prompt or None, **self.kwargs)
        tensors = [k for k, v in reference.items() if hasattr(v, "shape")]
        candidate = self._pad(ids, tensors)
        extras = {k: v for k, v in reference.items() if k not in tensors}
        same = set(tensors) == set(candidate) and all(
            reference[k].shape == candidate[k].shape and bool((reference[k] == candidate[k]).all()) for k in tensors)
        if same and (self.fast is None or extras == {k: v for k, v in self.extras.items() if k != "_keys"}):
            self.fast = True
            self.extras = {"_keys": tensors, **extras}
            if self.pad_multiple > 1:  # the same padded width whichever batch was checked (exact resume)
                return {**self._pad(ids, tensors, self.pad_multiple), **extras}
        else:
            self.fast = False
            log.debug("pre-tokenised batches differ from model.preprocess; re-tokenising every batch")
        return reference
