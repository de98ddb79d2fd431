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
of drmix's InfoNCE (``--matryoshka-dims``); hard negatives and the other processes' pairs are not used. From
Python, ``drmix.train(config, loss=CoSENTLoss(model))`` (or ``AnglELoss``, ``CosineSimilarityLoss``) trains the
same way on the loss object given.
"""
from __future__ import annotations

from typing import Any

from drmix.errors import ConfigError
from drmix.train.objective import OBJECTIVES, ObjectiveSpec, register_objective
from drmix.train.st_losses import ScoredPairLoss, check_static

__all__ = ["LOSSES", "ScoredPairLoss", "reads_scored_pairs"]

#: drmix's loss name -> sentence-transformers' loss class
LOSSES = {"cosent": "CoSENTLoss", "angle": "AnglELoss"}


def reads_scored_pairs(config: Any, objective: Any = None) -> bool:
    """Whether the run's loss trains on scored pairs: the objective given, else ``config.contrastive.loss``."""
    if objective is not None:
        return bool(getattr(objective, "scored_pairs", False))
    return config.contrastive.loss in LOSSES


def _build(config: Any, name: str) -> ScoredPairLoss:
    from sentence_transformers.sentence_transformer import losses

    check_static(config.mixture.strategy, name)
    if config.contrastive.matryoshka_dims:
        raise ConfigError(f"--matryoshka-dims is a setting of drmix's infonce loss; loss {name} has no such option.",
                          fix="drop --matryoshka-dims, or wrap the loss in sentence-transformers' MatryoshkaLoss "
                              "outside drmix.")
    return ScoredPairLoss(getattr(losses, LOSSES[name])(None, scale=1.0 / config.contrastive.temperature))


register_objective(ObjectiveSpec("cosent", lambda c: _build(c, "cosent"), "sentence-transformers' CoSENTLoss on "
                                  "scored pairs (sentence1, sentence2, score; scale 1/temperature); static only."))
register_objective(ObjectiveSpec("angle", lambda c: _build(c, "angle"), "sentence-transformers' AnglELoss on "
                                  "scored pairs (sentence1, sentence2, score; scale 1/temperature); static only."))
