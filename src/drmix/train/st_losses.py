"""sentence-transformers losses in drmix's trainer: a loss module with ``compute_loss_from_embeddings`` (the
embeddings drmix computed, columns ``[queries, positives, negatives_1, ...]``) as an
:class:`~drmix.train.objective.Objective`.

By name (``--loss``, registered in :data:`~drmix.train.objective.OBJECTIVES`):

* ``mnrl`` -- ``MultipleNegativesRankingLoss`` with ``scale = 1 / temperature`` (drmix's default temperature
  0.05 is its default scale 20), cosine scores, in-batch and hard negatives, ``gather_across_devices`` under DDP
  when ``cross_device_negatives``;
* ``cached_mnrl`` -- ``CachedMultipleNegativesRankingLoss``: the same loss computed in mini-batches with gradient
  caching (Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup",
  arXiv:2101.06983); drmix's own GradCache does the caching with ``--grad-cache-chunk N`` (the loss's
  ``mini_batch_size``; not given, 32, its default there: :class:`~drmix.config.train.ContrastiveConfig` sets it);
* ``gist`` -- refused by name (``GISTEmbedLoss`` needs a guide model, which the command line has no option for);
  as an object, ``drmix.train(config, loss=GISTEmbedLoss(model, guide))``, it is :class:`GISTEmbed`.

``MarginMSELoss`` is drmix's ``--loss margin_mse`` (the same formula, per example); as an object
(``drmix.train(..., loss=MarginMSELoss(model))``) it gets the teacher margins of the batch as labels.

A sentence-transformers loss returns one number per batch, not one per example, so it trains under the static
strategy only: a learned mixture (GroupDRO, tDRO, DoReMi, ...) weighs the examples of each collection by their own
losses, which a batch loss cannot give. Per-collection losses in ``metrics.jsonl`` are the batch loss of the
batches that held the collection. Hard-negative columns some example of a batch lacks are left out of that
batch's loss (sentence-transformers' columns need one text per example). Duplicate texts are not masked as false
negatives (``mask_duplicates`` is infonce's); sentence-transformers' remedy, batches without duplicates, is
``--batch-sampler no_duplicates``.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from drmix.errors import ConfigError
from drmix.train.objective import Objective, ObjectiveSpec, register_objective

log = logging.getLogger(__name__)

#: the sentence-transformers losses whose labels are the teacher's score margins (``[B, H]``)
MARGIN_LOSSES = ("MarginMSELoss",)
#: the loss objects trained on scored pairs (labels: the pairs' scores; drmix.train.scored_pairs)
PAIR_SCORE_LOSSES = ("CoSENTLoss", "AnglELoss", "CosineSimilarityLoss")


def check_static(strategy: str, loss: str) -> None:
    """Refuse a learned mixture strategy with a batch loss (see the module docstring)."""
    if str(strategy).lower() != "static":
        raise ConfigError(f"loss {loss} is a sentence-transformers loss, which returns one loss per batch; "
                          f"--strategy {strategy} weighs each collection's examples by their own losses, which a "
                          "batch loss cannot give.",
                          fix="train with --strategy static, or use --loss infonce (drmix's per-example InfoNCE: "
                              "MultipleNegativesRankingLoss's formula) with the learned strategy.")


def _check_contrastive(config: Any, loss: str) -> None:
    c = config.contrastive
    for flag, on in (("--matryoshka-dims", bool(c.matryoshka_dims)),
                     ("--no-in-batch-negatives", not c.in_batch_negatives)):
        if on:
            raise ConfigError(f"{flag} is a setting of drmix's infonce loss; loss {loss} has no such option.",
                              fix=f"drop {flag}, or train with --loss infonce.")


class SentenceTransformersLoss(Objective):
    """A sentence-transformers loss module over the embeddings drmix computed (one loss per batch)."""

    per_example = False

    def __init__(self, loss: torch.nn.Module, *, num_negatives: int, name: str | None = None) -> None:
        if not hasattr(loss, "compute_loss_from_embeddings"):
            raise ConfigError(f"{type(loss).__name__} computes its embeddings itself (its own forward over the "
                              "tokenised texts), so it cannot take the embeddings drmix's trainer computes.",
                              fix="pass a loss with compute_loss_from_embeddings (MultipleNegativesRankingLoss, "
                                  "MarginMSELoss, ...), or a drmix loss name (infonce, margin_mse, kl).")
        self.loss = loss
        self.num_negatives = num_negatives
        self.margins = type(loss).__name__ in MARGIN_LOSSES
        self.name = name or type(loss).__name__
        self._warned = False

    def builder(self, collections: list, *, seed: int, tokens: list | None) -> Any:
        from drmix.data.sampling import BatchBuilder

        if self.margins:
            from drmix.train.distill import check_teacher_scores

            check_teacher_scores(collections, self.name)
        return BatchBuilder(collections, self.num_negatives, seed=seed, tokens=tokens, scores=self.margins)

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        B, H = mask.shape
        negs = d.new_zeros(B, H, d.size(-1))
        negs[mask] = d[B:]
        full = [h for h in range(H) if bool(mask[:, h].all())]
        if len(full) < H and not self._warned:
            log.warning("%s: a batch has examples with fewer than %d hard negatives; its hard-negative columns "
                        "that some example lacks are left out of the loss", self.name, H)
            self._warned = True
        embeddings = [q.float(), d[:B].float(), *(negs[:, h].float() for h in full)]
        labels = torch.zeros(B, device=q.device)
        if self.margins:
            if batch is None or getattr(batch, "positive_scores", None) is None:
                raise ConfigError(f"{self.name} needs the batch's teacher scores, and none were drawn.",
                                  fix="train through drmix's Trainer, whose batch builder reads them for this loss.")
            pos = torch.as_tensor(batch.positive_scores, dtype=torch.float32, device=q.device)
            neg = torch.tensor([[float(batch.negative_scores[i][h]) for h in full] for i in range(B)],
                               dtype=torch.float32, device=q.device).reshape(B, len(full))
            labels = pos[:, None] - neg
        value = self.loss.compute_loss_from_embeddings(embeddings, labels)
        return value.expand(B)

    def card(self) -> dict[str, Any]:
        cfg = self.loss.get_config_dict() if hasattr(self.loss, "get_config_dict") else {}
        return {"loss": f"sentence-transformers' {type(self.loss).__name__}" + ("" if cfg else "."),
                "loss_tag": type(self.loss).__name__,
                "loss_fullname": f"{type(self.loss).__module__}.{type(self.loss).__name__}",
                "loss_config": {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool))}}

    def details(self) -> dict[str, Any]:
        return {"loss": type(self.loss).__name__}


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
            if not c.has_scores or not _one_score_each(c.dataset):
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


def _one_score_each(dataset: Any) -> bool:
    """Whether every row has exactly one positive score (counted in Arrow, without reading the rows)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(dataset.data.column("positive_scores"))
    return lengths.null_count == 0 and bool(pc.all(pc.equal(lengths, 1)).as_py())


class GISTEmbed(SentenceTransformersLoss):
    """A ``GISTEmbedLoss(model, guide)`` object over drmix's embeddings: its guide embeds the batch's texts (no
    gradient), and the loss is GISTEmbed's (Solatorio, "GISTEmbed: Guided In-sample Selection of Training
    Negatives for Text Embedding Fine-tuning", arXiv:2402.16829) as sentence-transformers computes it: anchor-
    positive, anchor-anchor, positive-positive and anchor-negative similarities, each candidate the guide scores
    above the example's positive (less ``margin``) masked, cross-entropy at ``temperature``. The first hard
    negative column is used (the loss takes at most one); candidates come from this process only."""

    def __init__(self, loss: torch.nn.Module, *, num_negatives: int) -> None:
        self.loss = loss
        self.num_negatives = min(num_negatives, 1)
        self.margins = False
        self.name = "GISTEmbedLoss"
        self._warned = False

    def wants_tokens(self) -> bool:
        return False  # the guide embeds the batch's texts

    def _guide(self, texts: list[str], device: torch.device) -> torch.Tensor:
        with torch.no_grad():
            return self.loss.guide.encode(texts, convert_to_tensor=True, show_progress_bar=False).to(device).float()

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        if batch is None:
            raise ConfigError("GISTEmbedLoss needs the batch's texts for its guide, and none were given.",
                              fix="train through drmix's Trainer.")
        L, B = self.loss, q.size(0)
        anchor, positive = q.float(), d[:B].float()
        anchor_g, positive_g = self._guide(list(batch.queries), q.device), self._guide(list(batch.positives), q.device)
        has_neg = mask.size(1) > 0 and bool(mask[:, 0].all())
        guided_sim = L.sim_matrix(anchor_g, positive_g).diagonal().view(-1, 1)

        def masked(guided: torch.Tensor, sim: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
            if L.margin_strategy == "absolute":
                drop = guided > (guided_sim - L.margin)
            else:
                drop = guided > (guided_sim - guided_sim.abs() * L.margin)
            if keep is not None:
                drop = drop & ~keep
            return sim.masked_fill(drop, float("-inf"))

        own = torch.eye(B, dtype=torch.bool, device=q.device)
        scores = [masked(L.sim_matrix(anchor_g, positive_g), L.sim_matrix(anchor, positive), own)]
        if L.contrast_anchors:
            scores.append(masked(L.sim_matrix(anchor_g, anchor_g), L.sim_matrix(anchor, anchor)))
        if L.contrast_positives:
            scores.append(masked(L.sim_matrix(positive_g, positive_g), L.sim_matrix(positive, positive)))
        if has_neg:
            rows = torch.arange(B, device=q.device)
            first = torch.cumsum(mask.reshape(-1).long(), 0).reshape(mask.shape)[:, 0] - 1  # row of each 1st negative
            negative = d[B:][first[rows]].float()
            negative_g = self._guide([n[0] for n in batch.negatives], q.device)
            scores.append(masked(L.sim_matrix(anchor_g, negative_g), L.sim_matrix(anchor, negative)))
        logits = torch.cat(scores, dim=1) / L.temperature
        value = torch.nn.functional.cross_entropy(logits, torch.arange(B, device=q.device))
        return value.expand(B)


def objective_from_loss(loss: torch.nn.Module, config: Any, strategy: Any = None) -> SentenceTransformersLoss:
    """The objective of a loss object given to :func:`drmix.api.train` (``GISTEmbedLoss``: :class:`GISTEmbed`)."""
    check_static(getattr(strategy, "name", None) or config.mixture.strategy, type(loss).__name__)
    if type(loss).__name__ == "GISTEmbedLoss":
        return GISTEmbed(loss, num_negatives=config.contrastive.num_negatives)
    if type(loss).__name__ in PAIR_SCORE_LOSSES:   # CoSENTLoss, AnglELoss, CosineSimilarityLoss: scored pairs
        return ScoredPairLoss(loss)
    return SentenceTransformersLoss(loss, num_negatives=config.contrastive.num_negatives)


def _mnrl(config: Any, *, cached: bool = False) -> SentenceTransformersLoss:
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    name = "cached_mnrl" if cached else "mnrl"
    check_static(config.mixture.strategy, name)
    _check_contrastive(config, name)
    c = config.contrastive
    from drmix.device import dist_info

    loss = MultipleNegativesRankingLoss(None, scale=1.0 / c.temperature,
                                        gather_across_devices=c.cross_device_negatives and dist_info()[0] > 1)
    return SentenceTransformersLoss(loss, num_negatives=c.num_negatives,
                                    name="CachedMultipleNegativesRankingLoss" if cached else None)


def _gist(config: Any) -> Objective:
    raise ConfigError("loss gist (sentence-transformers' GISTEmbedLoss) needs a guide model, which the command "
                      "line has no option for.",
                      fix="pass the loss object from Python: drmix.train(config, loss=GISTEmbedLoss(model, guide)); "
                          "or use --loss infonce --mask-duplicates (false negatives masked by their text).")


register_objective(ObjectiveSpec("mnrl", _mnrl, "sentence-transformers' MultipleNegativesRankingLoss "
                                                 "(scale 1/temperature); static strategy only."))
register_objective(ObjectiveSpec("cached_mnrl", lambda c: _mnrl(c, cached=True),
                                  "CachedMultipleNegativesRankingLoss: MNRL with --grad-cache-chunk (default 32); "
                                  "static only."))
register_objective(ObjectiveSpec("gist", _gist, "GISTEmbedLoss: refused (it embeds with a guide model itself)."))
