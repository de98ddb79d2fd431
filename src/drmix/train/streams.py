"""The extra batch streams strategies draw from, apart from the training batches: per training collection
(look-ahead steps) and per dev set (dev measurements). Each has its own seeded sampler, so drawing from
them never changes the training batches, and their state is checkpointed for an exact resume.
"""
from __future__ import annotations

from typing import Any

from drmix.data.batch import Batch
from drmix.data.collections import Collection
from drmix.data.sampling import BatchBuilder, MixtureSampler
from drmix.errors import ConfigError


class AuxiliaryStreams:
    """``draw_batch(collection, size)`` from the training collections, ``draw_dev_batch(dev, size)`` from dev sets."""

    def __init__(self, collections: list[Collection], dev_collections: list[Collection], *, num_negatives: int,
                 seed: int, keys: bool = False, scores: bool = False) -> None:
        """``keys`` / ``scores``: the training collections' batches carry duplicate keys / teacher scores, as the
        training batches do (:class:`~drmix.data.sampling.BatchBuilder`)."""
        self.collections = collections
        self.dev_collections = dev_collections
        self.aux_sampler = MixtureSampler([len(c) for c in collections], 1, seed=seed + 1)
        self.aux_builder = BatchBuilder(collections, num_negatives, seed=seed + 1, keys=keys, scores=scores)
        self.dev_sampler = (MixtureSampler([len(c) for c in dev_collections], 1, seed=seed + 2)
                            if dev_collections else None)
        self.dev_builder = BatchBuilder(dev_collections, 0, seed=seed + 2, keys=keys)

    @property
    def dev_names(self) -> list[str]:
        return [c.name for c in self.dev_collections]

    def draw_batch(self, collection: int, size: int) -> Batch:
        return self.aux_builder.build([(collection, r) for r in self.aux_sampler.take(collection, size)])

    def draw_dev_batch(self, dev: int, size: int) -> Batch:
        if self.dev_sampler is None:
            raise ConfigError("this strategy needs dev sets.", fix="pass --dev BEIR_DIR (with a dev split).")
        return self.dev_builder.build([(dev, r) for r in self.dev_sampler.take(dev, size)])

    def training_queries(self) -> list[str]:
        """Every training query, formatted as the collections format them for the model, in collection order."""
        return [c.format_query(q) for c in self.collections for q in c.dataset["query"]]

    def state_dict(self) -> dict[str, Any]:
        return {"aux_sampler": self.aux_sampler.state_dict(), "aux_builder": self.aux_builder.state_dict(),
                "dev_sampler": self.dev_sampler.state_dict() if self.dev_sampler else None,
                "dev_builder": self.dev_builder.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.aux_sampler.load_state_dict(state["aux_sampler"])
        self.aux_builder.load_state_dict(state["aux_builder"])
        if self.dev_sampler and state.get("dev_sampler"):
            self.dev_sampler.load_state_dict(state["dev_sampler"])
            self.dev_builder.load_state_dict(state["dev_builder"])
