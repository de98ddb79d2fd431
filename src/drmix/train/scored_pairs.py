"""Scored pairs: ``--loss cosent`` and ``--loss angle``, sentence-transformers' CoSENTLoss and AnglELoss over
drmix's embeddings.

Both train on ``(text1, text2, score)`` rows -- sentence-transformers' pair-score layout (``sentence1, sentence2,
score`` or ``anchor, positive, score``) -- which drmix's data layer otherwise refuses (a retriever's losses have
no use for a graded pair). Under one of these losses the trainer reads such rows as scored pairs
(:func:`drmix.data.formats.reading_scored_pairs`): the first text is the query side, the second the document
side, the score its one teacher score. The loss is sentence-transformers' own ``compute_loss_from_embeddings``
on the two sides' embeddings and the batch's scores:

* ``cosent`` -- CoSENT (Su, "CoSENT: A more efficient sentence vector scheme than Sentence-BERT", 2022; Huang et
  al., TASLP 2024): ``log(1 + sum exp(scale * (s(k,l) - s(i,j))))`` over the pairs of the batch whose score
  ranks ``(i,j)`` above ``(k,l)``, ``s`` the cosine;
* ``angle`` -- AnglE (Li and Li, "AnglE-optimized Text Embeddings", arXiv:2309.12871): the same with the angle
  difference in complex space.

``scale`` is ``1 / temperature`` (drmix's default 0.05 is the losses' default scale 20). The loss ranks the
pairs of one batch, so it is one number per batch: learned mixture strategies, which weigh each collection's
examples by their own losses, are refused (:func:`~drmix.train.st_losses.check_static`), as are the settings
of drmix's InfoNCE (``--matryoshka-dims``); hard negatives and the other processes' pairs are not used.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from drmix.errors import ConfigError
from drmix.train.objective import OBJECTIVES, ObjectiveSpec
from drmix.train.st_losses import SentenceTransformersLoss, check_static

#: drmix's loss name -> sentence-transformers' loss class
LOSSES = {"cosent": "CoSENTLoss", "angle": "AnglELoss"}


class ScoredPairLoss(SentenceTransformersLoss):
    """A sentence-transformers pair-score loss (``compute_loss_from_embeddings([a, b], scores)``) over scored
    pairs: the query side's and the positive's embeddings, labels the rows' scores."""

    #: the trainer reads pair-score rows as scored pairs for this objective (drmix.data.formats)
    scored_pairs = True

    def __init__(self, loss: torch.nn.Module, *, name: str | None = None) -> None:
        super().__init__(loss, num_negatives=0, name=name)

    def builder(self, collections: list, *, seed: int, tokens: list | None) -> Any:
        from drmix.data.sampling import BatchBuilder

        for c in collections:
            if not c.has_scores or any(len(s or []) != 1 for s in c.dataset["positive_scores"]):
                raise ConfigError(f"loss {self.name} trains on scored pairs (text1, text2, score), and collection "
                                  f"{c.name!r} ({c.source}) has rows without exactly one score.",
                                  fix="give every row of it two texts and a score (sentence1, sentence2, score), or "
                                      "train a (query, positive, negatives) collection with --loss infonce.")
        return BatchBuilder(collections, 0, seed=seed, tokens=tokens, scores=True)

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        if batch is None or getattr(batch, "positive_scores", None) is None:
            raise ConfigError(f"{self.name} needs the batch's pair scores, and none were drawn.",
                              fix="train through drmix's Trainer, whose batch builder reads them for this loss.")
        B = q.size(0)
        labels = torch.as_tensor(np.asarray(batch.positive_scores, dtype=np.float32), device=q.device)
        value = self.loss.compute_loss_from_embeddings([q.float(), d[:B].float()], labels)
        return value.expand(B)


def _build(config: Any, name: str) -> ScoredPairLoss:
    from sentence_transformers.sentence_transformer import losses

    check_static(config.mixture.strategy, name)
    if config.contrastive.matryoshka_dims:
        raise ConfigError(f"--matryoshka-dims is a setting of drmix's infonce loss; loss {name} has no such option.",
                          fix="drop --matryoshka-dims, or wrap the loss in sentence-transformers' MatryoshkaLoss "
                              "outside drmix.")
    return ScoredPairLoss(getattr(losses, LOSSES[name])(None, scale=1.0 / config.contrastive.temperature))


OBJECTIVES.register(ObjectiveSpec("cosent", lambda c: _build(c, "cosent"), "sentence-transformers' CoSENTLoss on "
                                  "scored pairs (sentence1, sentence2, score; scale 1/temperature); static only."))
OBJECTIVES.register(ObjectiveSpec("angle", lambda c: _build(c, "angle"), "sentence-transformers' AnglELoss on "
                                  "scored pairs (sentence1, sentence2, score; scale 1/temperature); static only."))
