"""The trainer's one extension point for *what* is optimised: an :class:`Objective`.

The loop (:class:`~drmix.train.trainer.Trainer`) owns devices, optimiser, accumulation, checkpoints and logs;
a :class:`~drmix.mixture.base.Strategy` decides which collection each batch is drawn from and how per-example
losses are reduced; the objective decides how drawn rows become a batch and how the two sides' embeddings become
per-example losses, plus what the run records about it. Built in:

* :class:`InfoNCE` (the default, ``loss: infonce``) -- fine-tuning on ``(query, positive, negatives)``
  collections with hard, in-batch and cross-device negatives, false negatives masked
  (``mask_duplicates``), optional Matryoshka sizes (:func:`drmix.model.losses.contrastive_losses`);
* ``loss: margin_mse`` and ``loss: kl`` -- distillation from teacher scores (:mod:`drmix.train.distill`);
* ``loss: mnrl`` / ``cached_mnrl`` -- sentence-transformers' losses over drmix's embeddings
  (:mod:`drmix.train.st_losses`, which also wraps a loss object given to :func:`drmix.api.train`);
* ``loss: cosent`` / ``angle`` -- sentence-transformers' CoSENTLoss / AnglELoss on scored pairs
  (:mod:`drmix.train.scored_pairs`);
* :class:`drmix.pretrain.coco.CocoObjective` -- COCO's contrastive pretraining on two spans of one document.

The objectives a config can name (``contrastive.loss``) are registered in :data:`OBJECTIVES` with
:func:`register_objective` (a :class:`drmix.registry.Registry`; a package outside drmix adds one through the
``drmix.objectives`` entry-point group). sentence-transformers plugs losses in the same way (a loss module given to
its trainer); an objective also carries the few settings a loss implies for the loop (dropout in the forward, which
prompt the query side takes).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from drmix.device import dist_info
from drmix.model.losses import contrastive_losses, false_negative_mask
from drmix.registry import Registry

if TYPE_CHECKING:
    from drmix.data.sampling import RowBuilder


class Objective(ABC):
    """What the loop optimises. Subclasses override :meth:`losses` and, where needed, :meth:`builder`."""

    #: name shown in logs
    name = "objective"
    #: False: the backbone runs in eval mode (no dropout) in the training forward (COCO, as its authors do)
    dropout: bool = True
    #: True: the query side is encoded with the document prompt (both sides are documents, e.g. COCO's spans)
    documents_on_both_sides: bool = False
    #: hard negatives a batch carries per example (the builder's and the encoder's setting)
    num_negatives: int = 0

    def builder(self, collections: list, *, seed: int, tokens: list | None) -> RowBuilder:
        """The batch builder (a :class:`~drmix.data.sampling.RowBuilder`): ``build(pairs) -> Batch`` over
        ``(collection, row)`` pairs, with ``state_dict`` / ``load_state_dict`` (its random state is part of every
        checkpoint). ``tokens``: the collections' stored
        ids when :meth:`wants_tokens` and the model's preprocessing allows."""
        from drmix.data.sampling import BatchBuilder

        return BatchBuilder(collections, self.num_negatives, seed=seed, tokens=tokens)

    def wants_tokens(self) -> bool:
        """Whether the builder can use stored token ids of the collections (:mod:`drmix.data.tokenized`)."""
        return True

    @abstractmethod
    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        """Per-example losses from query embeddings ``q`` [B, D], document embeddings ``d`` (the B positives
        first, then the hard negatives ``mask`` [B, H] marks) -- with gradient; ``gather``: add the documents of
        every process as negatives; ``batch``: this process's :class:`~drmix.data.batch.Batch` (its duplicate
        keys, teacher scores), None where a caller has only embeddings."""

    def card(self) -> dict[str, Any]:
        """Fields of the model card's :class:`~drmix.report.card.CardInfo` this objective sets."""
        return {}

    def details(self) -> dict[str, Any]:
        """What the run's :class:`~drmix.train.saving.TrainResult` records about the objective."""
        return {}


class InfoNCE(Objective):
    """InfoNCE over hard, in-batch and cross-device negatives (the fine-tuning objective of every paper drmix
    implements; van den Oord et al., "Representation Learning with Contrastive Predictive Coding",
    arXiv:1807.03748, Eq. 4), at each Matryoshka size too (Kusupati et al., NeurIPS 2022, arXiv:2205.13147)."""

    name = "infonce"

    def __init__(self, *, temperature: float, num_negatives: int, in_batch: bool = True,
                 cross_device: bool = True, matryoshka_dims: list[int] | tuple[int, ...] = (),
                 mask_duplicates: bool = False) -> None:
        self.temperature = temperature
        self.num_negatives = num_negatives
        self.in_batch = in_batch
        self.cross_device = cross_device
        self.matryoshka_dims = list(matryoshka_dims)
        self.mask_duplicates = mask_duplicates

    @classmethod
    def from_config(cls, config: Any) -> "InfoNCE":
        """The objective a :class:`~drmix.config.TrainConfig` describes (its ``contrastive`` part)."""
        c = config.contrastive
        return cls(temperature=c.temperature, num_negatives=c.num_negatives, in_batch=c.in_batch_negatives,
                   cross_device=c.cross_device_negatives, matryoshka_dims=c.matryoshka_dims,
                   mask_duplicates=c.mask_duplicates)

    def builder(self, collections: list, *, seed: int, tokens: list | None) -> Any:
        from drmix.data.sampling import BatchBuilder

        return BatchBuilder(collections, self.num_negatives, seed=seed, tokens=tokens, keys=self.mask_duplicates)

    def exclusions(self, batch: Any, rows: int, negatives: int, *, gather: bool,
                   device: torch.device) -> torch.Tensor | None:
        """The false-negative mask of this process's ``rows`` examples (None when masking is off or the batch
        carries no keys); see :func:`drmix.model.losses.false_negative_mask`."""
        keys = getattr(batch, "keys", None)
        if not self.mask_duplicates or keys is None:
            return None
        world, _ = dist_info()
        n_keys, n_valid = keys.padded_negatives(negatives)
        return false_negative_mask(torch.from_numpy(keys.queries), torch.from_numpy(keys.positives),
                                   torch.from_numpy(n_keys), torch.from_numpy(n_valid),
                                   (batch.offset, batch.offset + rows), in_batch=self.in_batch,
                                   gathered=gather and world > 1).to(device)

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        B, H = mask.shape
        p = d[:B]
        negs = None
        if H:
            negs = d.new_zeros(B, H, d.size(-1))
            negs[mask] = d[B:]
        gather = gather and self.cross_device
        exclude = self.exclusions(batch, B, H, gather=gather, device=q.device)
        return contrastive_losses(q.float(), p.float(), None if negs is None else negs.float(), mask if H else None,
                                  temperature=self.temperature, in_batch=self.in_batch,
                                  gather=gather, matryoshka_dims=self.matryoshka_dims, exclude=exclude)

    def card(self) -> dict[str, Any]:
        return {"loss": "InfoNCE (contrastive, in-batch and hard negatives"
                        + (", duplicate texts masked as false negatives)" if self.mask_duplicates else ")"),
                "loss_tag": "InfoNCE"}


@dataclass(frozen=True)
class ObjectiveSpec:
    """A loss a config can name (``contrastive.loss``): ``build(config) -> Objective``."""

    name: str
    build: Callable[[Any], Objective]
    help: str = ""


#: the objectives a config can name; built-ins in drmix.train.objective and drmix.train.distill
OBJECTIVES: Registry[ObjectiveSpec] = Registry("loss", ("drmix.train.objective", "drmix.train.distill",
                                                        "drmix.train.st_losses", "drmix.train.scored_pairs"),
                                               entry_points="drmix.objectives")


def register_objective(spec: ObjectiveSpec) -> ObjectiveSpec:
    """Add a loss a config can name (called by its module at import time;
    :meth:`drmix.registry.Registry.register`)."""
    return OBJECTIVES.register(spec)


register_objective(ObjectiveSpec("infonce", InfoNCE.from_config, "InfoNCE over in-batch and hard negatives."))


def objective_from_config(config: Any) -> Objective:
    """The objective ``config.contrastive.loss`` names (a ConfigError listing the registered ones otherwise)."""
    return OBJECTIVES.get(config.contrastive.loss).build(config)
