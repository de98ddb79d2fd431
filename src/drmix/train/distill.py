"""Distillation from teacher scores: MarginMSE and KL divergence, as trainer :class:`~drmix.train.objective.Objective`s.

Both read the teacher's score of each example's positive and hard negatives, kept per row in the collections'
``positive_scores`` / ``negative_scores`` columns (aligned with the texts, :mod:`drmix.data.formats`): written
by ``drmix mine`` (the mining model's cosines), ``drmix augment mine`` (the teacher's), ``drmix augment
rerank`` (the LLM's order, as ``-ln(rank)``), FlagEmbedding's ``pos_scores``/``neg_scores`` and
sentence-transformers' label columns. The student's score of a document is the inner product of the
embeddings ``s(q, d) = q . d`` (a cosine when the model normalises), as sentence-transformers'
``pairwise_dot_score``. Only the example's own positive and hard negatives are scored (no in-batch negatives),
as in both papers and in sentence-transformers' losses.

* ``loss: margin_mse`` -- MarginMSE (Hofstätter, Althammer, Schröder, Sertkan, Hanbury, "Improving Efficient
  Neural Ranking Models with Cross-Architecture Knowledge Distillation", arXiv:2010.02666, Eq. 1)::

      l_i = mean_h ( (s(q_i, p_i) - s(q_i, n_ih)) - (t(q_i, p_i) - t(q_i, n_ih)) )^2

  over the example's hard negatives ``h``; the mean over the batch is sentence-transformers' ``MarginMSELoss``
  (``nn.MSELoss`` over the ``[B, H]`` margins) when every example has ``H`` negatives.
* ``loss: kl`` -- KL divergence from the teacher's to the student's softmax over ``{p_i, n_i1..n_iH}``
  (Lin, Yang, Lin, "Distilling Dense Representations for Ranking using Tightly-Coupled Teachers",
  arXiv:2010.11386; sentence-transformers' ``DistillKLDivLoss``, FlagEmbedding's ``kd_loss_type kl_div``)::

      l_i = sum_j P_t(j) (log P_t(j) - log P_s(j)),  P_t = softmax(t / tau_t),  P_s = softmax(s / tau)

  with ``tau`` the contrastive ``temperature`` (FlagEmbedding's choice for normalised students; sentence-
  transformers divides dot products by 1 and multiplies the loss by ``tau^2``) and ``tau_t`` the
  ``teacher_temperature``. ``-ln(rank)`` scores (rerank) at ``tau_t = 1`` give ``P_t`` proportional to ``1/rank``.

Missing scores are refused before training (:func:`check_teacher_scores`): a collection without score columns,
or a row whose scores are empty while it has texts to score.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from drmix.errors import ConfigError, DataError
from drmix.train.objective import Objective, ObjectiveSpec, register_objective

log = logging.getLogger(__name__)

_SCORES_FIX = ("give each row teacher scores: `drmix mine` and `drmix augment mine|rerank` write positive_scores / "
               "negative_scores, FlagEmbedding rows carry pos_scores / neg_scores, --columns maps other columns "
               "(e.g. --columns positive_scores=pos_s,negative_scores=neg_s); or train with --loss infonce.")


def check_teacher_scores(collections: list, loss: str) -> None:
    """Refuse collections without teacher scores, or with rows whose texts have none (before any step).
    Rows without a hard negative are counted and warned about: they contribute a zero loss."""
    import pyarrow.compute as pc

    for c in collections:
        if not c.has_scores:
            raise ConfigError(f"loss {loss} needs teacher scores, and collection {c.name!r} has none (no "
                              "positive_scores / negative_scores).", path=c.source or c.name, fix=_SCORES_FIX)
        bad_rows, first_bad, lone, offset = 0, None, 0, 0
        cols = ["positives", "negatives", "positive_scores", "negative_scores"]
        for table in c.dataset.select_columns(cols).with_format("arrow").iter(batch_size=100_000):
            n = {k: np.asarray(pc.list_value_length(table.column(k)).fill_null(0).to_numpy(zero_copy_only=False))
                 for k in cols}
            bad = np.flatnonzero(((n["positive_scores"] == 0) & (n["positives"] > 0))
                                 | ((n["negative_scores"] == 0) & (n["negatives"] > 0)))
            if bad.size and first_bad is None:
                first_bad = offset + int(bad[0])
            bad_rows += int(bad.size)
            lone += int((n["negatives"] == 0).sum())
            offset += table.num_rows
        if bad_rows:
            raise DataError(f"loss {loss} needs teacher scores for every row; {bad_rows} of {len(c)} rows of "
                            f"collection {c.name!r} have none (the first is row {first_bad + 1}).",
                            path=c.source or c.name, fix=_SCORES_FIX)
        _check_finite_scores(c, loss)
        if lone:
            log.warning("%s: %d of %d rows have no hard negative; loss %s scores a positive against its negatives, "
                        "so they contribute a zero loss", c.name, lone, len(c), loss)


def _finite_counts(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a list<float> Arrow column: (values, finite values)."""
    import pyarrow.compute as pc

    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    n = np.asarray(pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    values = np.asarray(pc.list_flatten(column).to_numpy(zero_copy_only=False), dtype=np.float64)
    parents = np.asarray(pc.list_parent_indices(column).to_numpy(zero_copy_only=False), dtype=np.int64)
    finite = np.bincount(parents, weights=np.isfinite(values), minlength=len(n)).astype(np.int64)
    return n, finite


def _check_finite_scores(c: Any, loss: str) -> None:
    """NaN / infinite teacher scores: left out of the loss, so a row without one finite score adds zero loss.
    Every row so: refused (training would learn nothing); some: counted and said, naming the first."""
    from drmix.data.formats import LAYOUTS

    layout = LAYOUTS.get(getattr(c, "layout", "drmix"))
    own = {"positive_scores": (getattr(layout, "positive_scores", ()) or ("positive_scores",))[0],
           "negative_scores": (getattr(layout, "negative_scores", ()) or ("negative_scores",))[0]}
    rows_bad = rows_empty = offset = 0
    first: tuple[int, str] | None = None
    for table in c.dataset.select_columns(list(own)).with_format("arrow").iter(batch_size=100_000):
        (np_, fp), (nn, fn) = (_finite_counts(table.column(k)) for k in own)
        bad_p, bad_n = fp < np_, fn < nn
        bad = np.flatnonzero(bad_p | bad_n)
        if bad.size and first is None:
            i = int(bad[0])
            first = (offset + i + 1, own["positive_scores" if bad_p[i] else "negative_scores"])
        rows_bad += int(bad.size)
        rows_empty += int(((fp + fn) == 0).sum())
        offset += table.num_rows
    if not rows_bad:
        return
    where = f"row {first[0]}, {first[1]}" if first else ""
    if rows_empty == len(c):
        raise DataError(f"loss {loss}: the teacher scores of every one of the {len(c)} rows of collection "
                        f"{c.name!r} are NaN or infinite (the first: {where}); every step's loss would be 0.",
                        path=c.source or c.name,
                        fix="recompute the scores (`drmix mine` writes them), or train with --loss infonce.")
    log.warning("%s: %d of %d rows have NaN or infinite teacher scores (the first: %s); loss %s leaves them "
                "out, and %d of them has no finite score (a zero loss)", c.source or c.name, rows_bad, len(c),
                where, loss, rows_empty)


class Distillation(Objective):
    """Shared by the two distillation losses: teacher scores from the batch, the student's own candidates."""

    name = "distillation"
    paper_loss = ""

    def __init__(self, *, num_negatives: int, temperature: float = 0.05, teacher_temperature: float = 1.0) -> None:
        if num_negatives < 1:
            raise ConfigError(f"loss {self.name} scores the positive against hard negatives, and num_negatives is "
                              f"{num_negatives}.", fix="set --num-negatives 1 or more.")
        self.num_negatives = num_negatives
        self.temperature = temperature
        self.teacher_temperature = teacher_temperature

    @classmethod
    def from_config(cls, config: Any) -> "Distillation":
        c = config.contrastive
        return cls(num_negatives=c.num_negatives, temperature=c.temperature, teacher_temperature=c.teacher_temperature)

    def builder(self, collections: list, *, seed: int, tokens: list | None) -> Any:
        from drmix.data.sampling import BatchBuilder

        check_teacher_scores(collections, self.name)
        return BatchBuilder(collections, self.num_negatives, seed=seed, tokens=tokens, scores=True)

    def scores(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, batch: Any
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(student [B, 1 + H], teacher [B, 1 + H], valid [B, 1 + H])``: column 0 the positive."""
        B, H = mask.shape
        if batch is None or getattr(batch, "positive_scores", None) is None:
            raise ConfigError(f"loss {self.name} needs the batch's teacher scores, and none were drawn.",
                              fix="train through drmix's Trainer, whose batch builder reads them for this loss.")
        q = q.float()
        pos = (q * d[:B].float()).sum(-1, keepdim=True)
        negs = d.new_zeros(B, H, d.size(-1), dtype=torch.float32)
        negs[mask] = d[B:].float()
        student = torch.cat([pos, torch.einsum("bd,bhd->bh", q, negs)], dim=1)
        teacher = np.full((B, 1 + H), np.nan)
        teacher[:, 0] = batch.positive_scores
        for i, ns in enumerate(batch.negative_scores):
            k = min(len(ns), H)
            teacher[i, 1:1 + k] = ns[:k]
        teacher_t = torch.as_tensor(teacher, dtype=torch.float32, device=q.device)
        valid = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=q.device), mask.to(q.device)], dim=1)
        valid = valid & torch.isfinite(teacher_t)
        return student, teacher_t.nan_to_num(0.0), valid

    def card(self) -> dict[str, Any]:
        return {"loss": self.paper_loss, "loss_tag": self.tag,
                "loss_fullname": f"{type(self).__module__}.{type(self).__name__}",
                "loss_config": {"temperature": self.temperature, "teacher_temperature": self.teacher_temperature,
                                "hard_negatives_per_query": self.num_negatives}}

    tag = "Distillation"


class MarginMSE(Distillation):
    """MarginMSE (arXiv:2010.02666, Eq. 1; see the module docstring)."""

    name = "margin_mse"
    tag = "MarginMSE"
    paper_loss = "MarginMSE (distillation of the teacher's positive-negative score margins, arXiv:2010.02666)"

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        student, teacher, valid = self.scores(q, d, mask, batch)
        s_margin = student[:, :1] - student[:, 1:]
        t_margin = teacher[:, :1] - teacher[:, 1:]
        ok = valid[:, 1:] & valid[:, :1]
        sq = ((s_margin - t_margin) ** 2).masked_fill(~ok, 0.0)
        return sq.sum(-1) / ok.sum(-1).clamp(min=1)

    def card(self) -> dict[str, Any]:
        out = super().card()
        out["loss_config"].pop("temperature")
        out["loss_config"].pop("teacher_temperature")
        return out


class DistillKL(Distillation):
    """KL divergence from the teacher's to the student's softmax (arXiv:2010.11386; see the module docstring)."""

    name = "kl"
    tag = "DistillKL"
    paper_loss = ("KL divergence from the teacher's to the student's softmax over the positive and hard negatives "
                  "(distillation, arXiv:2010.11386)")

    def losses(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *, gather: bool,
               batch: Any = None) -> torch.Tensor:
        student, teacher, valid = self.scores(q, d, mask, batch)
        neg_inf = float("-inf")
        log_ps = torch.log_softmax((student / self.temperature).masked_fill(~valid, neg_inf), dim=-1)
        log_pt = torch.log_softmax((teacher / self.teacher_temperature).masked_fill(~valid, neg_inf), dim=-1)
        terms = torch.where(valid, log_pt.exp() * (log_pt - log_ps), torch.zeros_like(log_ps))
        return terms.sum(-1)


register_objective(ObjectiveSpec("margin_mse", MarginMSE.from_config,
                                  "MarginMSE on the teacher's positive-negative margins (arXiv:2010.02666)."))
register_objective(ObjectiveSpec("kl", DistillKL.from_config,
                                  "KL divergence to the teacher's softmax over positive and negatives."))
