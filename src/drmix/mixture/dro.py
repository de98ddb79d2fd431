"""Learned dataset weights by distributionally robust optimisation: tDRO, DoReMi and GroupDRO.

Specification: tDRO ("Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
Ma et al., AAAI 2025, arXiv:2408.10613), with the implementation facts recorded in
seeds/README.md for tDRO, DoReMi and GroupDRO. The three are one :class:`DROStrategy`; they differ only
in the *measurement* ``M_g`` of each collection ``g`` and in the defaults of the update.

Stage 1 of tDRO trains a proxy model on *mixed* batches (every collection, equal share, sampled with
probability 1/k: Eq. 1 with uniform alpha) with hard-negative-only InfoNCE per example (Eq. 2), while a
frozen reference model is forwarded on the same inputs. Per step (the paper's order):

1. measure each collection present in the batch from the per-example proxy losses ``l_i`` and
   reference losses ``r_i`` (``B`` examples, ``G_g`` those of collection ``g``):

   * ``ratio`` (tDRO, Eq. 5 as the authors implement it, ``modeling_group_dro_v2.py``,
     ``DROModelv2.compute_group_dro_loss``): the reference loss is L1-normalised over the (global) batch,
     ``r~_i = r_i / sum_j r_j``, and ``M_g = mean_{i in G_g} max(l_i / r~_i, 0)``. The guard on tiny reference
     losses is the authors' (``reference_guard: sum``, default): an example with ``r~_i <
     min_relative_reference`` (default 1e-4) has its normaliser replaced by 1 (its term is ``l_i``). It is
     relative to the batch *sum*, so at batch 96 an example is guarded only when its reference loss is under
     ~1% of the batch mean. ``reference_guard: mean`` keeps the earlier rule (examples under
     ``min_relative_reference`` = 0.2 of the batch *mean* contribute 0 but still count), which at small
     batches zeroes most examples of easy collections. ``min_relative_reference: 0`` divides every example
     (zero reference losses are then left out).
   * ``difference`` (DoReMi, and the paper's "minus" ablation): ``M_g = mean_{i in G_g} max(l_i - r_i, 0)``.
   * ``raw`` (GroupDRO, the paper's "proxy loss only" ablation): ``M_g = mean_{i in G_g} l_i``.

2. update the log-weights by exponentiated-gradient ascent (Eq. 4 in log space):
   ``g = M`` (0 for absent collections); with ``normalize_gradient`` ``g`` is clipped at L2 norm
   ``max_grad_norm`` = 1.0 as the authors' ``torch.nn.utils.clip_grad_norm_`` does it
   (``g <- g * min(1, 1 / (||g|| + 1e-6))``; the ratio measurement's norm is far above 1, so in practice a
   rescaling to unit norm, and lr 2e-2 moves every log-weight by at most 0.02 per step);
   ``log alpha_g <- log alpha_g + lr * g_g``; re-normalise (softmax over all collections: an absent one keeps
   its log-weight but shares the renormalisation, as in the authors' SGD step and GroupDRO's
   ``q <- q exp(eta * loss) / Z``). DoReMi then smooths with the uniform distribution,
   ``alpha <- (1 - c) alpha + c / k`` (c = 1e-3), and GroupDRO is the plain ``q <- q * exp(eta * loss)``
   (eta = 0.01). tDRO keeps no floor on the weights.

3. return the loss to back-propagate, weighted by the *just-updated* weights (``objective``): ``examples`` (tDRO's
   Eq. 6 as its authors implement it, and DoReMi's trainer): ``L = sum_i alpha_{g(i)} l_i / sum_i alpha_{g(i)}``;
   ``groups`` (GroupDRO, kohpangwei/group_DRO ``loss.py``, ``compute_robust_loss``: ``group_loss @ adv_probs``):
   ``L = sum_g alpha_g mean_{i in G_g} l_i`` with ``mean = 0`` for a collection absent from the batch and no
   renormalisation over the present ones. With every collection present in equal shares the two are equal
   (``sum_g alpha_g = 1``); with one absent, ``examples`` divides by the present weights' sum and ``groups`` does
   not, and with unequal shares ``examples`` weights each collection by its share of the batch as well.

Output (``weights.json``): the final weights, their mean over steps (DoReMi's output; with
``mean_counts_initial``, DoReMi's default, the initial uniform weights are the mean's first term, as its
``avg_domain_weights`` with ``update_counter`` starting at 1; tDRO's mean starts at the first update), an EMA
(factor 0.1, as in the authors' code), and the top-K% selections (K = 10..90): the ``floor(k*K/100)``
(at least 1) collections of highest weight, which the paper transfers uniformly (top-70%).

Departures, and why:

* A collection absent from a batch (``absent``): ``renormalise`` (tDRO and GroupDRO, their authors' rule) gives it
  gradient 0 and the softmax runs over every collection; ``previous`` (DoReMi's default, its ``perdomain_scores``)
  uses its last measurement again. DoReMi initialises those scores to the log of the LM's vocabulary size, which
  has no counterpart for retrieval losses: here a collection never measured yet scores 0. ``keep`` (an option)
  leaves an absent collection's weight exactly as it is and renormalises the present ones among themselves.
  With every collection present (mixed batches of at least one example each) the three are the same update.
* Non-finite losses (a bad batch) or an all-zero reference loss skip the weight update for that step
  with a warning; log-weights are stored re-normalised (log-softmax) and clamped at log(1e-300)
  (a numerical guard against float underflow, not an algorithmic floor), so they stay finite and
  every weight stays positive whatever the losses do.
* The weights are updated with a hand-written rule (a handful of numpy lines in float64) instead of an
  SGD optimiser over a ``torch`` parameter as in the authors' code: SGD without momentum (their
  default) keeps no optimiser state, and float64 makes the trajectory exactly reproducible on resume.
* Under DDP the per-collection sums and counts (and the batch's reference normaliser) are all-reduced,
  so every rank measures the global batch and makes the same update.
* Gradient accumulation, ``accumulation: micro`` (the default for ``ratio``; tDRO's ``DROTrainer.
  training_step_for_dromodelv2``): each micro-batch is measured on its own (its own reference normaliser and
  guard), its ``M`` is added into the weights' gradient, and at the last micro-batch the gradient is divided
  by the number of accumulation steps, clipped, and the weights step once. ``accumulation: joined`` (the
  default for ``difference`` and ``raw``, as DoReMi's trainer concatenates the micro-batches' scores) keeps
  the per-example losses of the micro-batches and measures them together at the last one, so the weights
  end where one batch of the same examples would take them. Either way each micro-batch's loss is weighted
  by the weights current when it is processed: the previous step's for all but the last, the just-updated
  ones for the last.
* A micro-batch whose proxy losses are not all finite is never back-propagated: :meth:`DROStrategy.loss`
  returns a zero loss that reaches no model parameter (and the weight update of that step is skipped),
  so one bad batch cannot corrupt the proxy.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from drmix.data.batch import Batch
from drmix.device import all_reduce
from drmix.mixture.base import StepContext, Strategy
from drmix.mixture.registry import StrategySpec, register_strategy
from drmix.papers import DOREMI, GROUPDRO, TDRO

log = logging.getLogger(__name__)

Measurement = Literal["ratio", "difference", "raw"]

#: strategy name (``TrainConfig.strategy``) -> measurement
STRATEGY_MEASUREMENT: dict[str, Measurement] = {"tdro": "ratio", "doremi": "difference", "groupdro": "raw"}
#: defaults that depend on the measurement: (lr, normalize_gradient, smoothing, output)
_DEFAULTS: dict[str, tuple[float, bool, float, str]] = {
    "ratio": (2e-2, True, 0.0, "final"),        # tDRO: lr 2e-2, gradient clipped at norm 1, final weights
    "difference": (1.0, False, 1e-3, "mean"),   # DoReMi: eta 1.0, smoothing c=1e-3, average over steps
    "raw": (1e-2, False, 0.0, "final"),         # GroupDRO: eta 0.01
}
_MIN_LOG_WEIGHT = math.log(1e-300)


class DROConfig(BaseModel):
    """Options of the DRO strategy family (defaults from the papers; ``None`` = the measurement's default)."""

    model_config = ConfigDict(extra="forbid")

    measurement: Measurement | None = Field(
        None, description="ratio (tDRO), difference (DoReMi) or raw (GroupDRO); None = from the strategy name.")
    lr: float | None = Field(None, gt=0, description="Weight learning rate: 2e-2 ratio, 1.0 difference, 0.01 raw.")
    normalize_gradient: bool | None = Field(
        None, description="Clip the measurement vector at L2 norm max_grad_norm before the step (True for ratio).")
    smoothing: float | None = Field(
        None, ge=0, lt=1, description="Mix with uniform after each update: 1e-3 for difference, else 0.")
    output: Literal["final", "mean", "ema"] | None = Field(
        None, description="Which weights go to weights.json 'weights' and the top-K lists: "
                          "mean for difference, else final.")
    ema: float = Field(0.1, gt=0, le=1, description="EMA factor of the tracked weights (authors' code: 0.1).")
    max_grad_norm: float = Field(1.0, gt=0, description="Clip norm of the measurement vector when normalize_gradient "
                                                         "(authors' clip_grad_norm_ at 1.0).")
    absent: Literal["renormalise", "keep", "previous"] | None = Field(
        None, description="A collection absent from the batch: renormalise = zero gradient, softmax over all "
                          "(tDRO, GroupDRO); previous = its last measurement again, softmax over all (DoReMi's "
                          "perdomain_scores; 0 before its first); keep = its weight unchanged, the others "
                          "renormalised among themselves (None: previous for difference, else renormalise).")
    objective: Literal["examples", "groups"] | None = Field(
        None, description="Loss the proxy trains on: examples = sum_i a_g(i) l_i / sum_i a_g(i) (tDRO's and DoReMi's "
                          "code); groups = sum_g a_g mean_(i in g) l_i, absent collections contributing 0, no "
                          "renormalisation (GroupDRO's group_loss @ adv_probs). None: groups for groupdro, else "
                          "examples.")
    mean_counts_initial: bool | None = Field(
        None, description="The running mean of the weights counts the initial (uniform) weights as its first "
                          "term (DoReMi's avg_domain_weights, update_counter starting at 1); None: true for "
                          "difference, false otherwise (tDRO's train_domain_weights_mean).")
    accumulation: Literal["micro", "joined"] | None = Field(
        None, description="Under gradient accumulation: micro = measure each micro-batch, average the gradients "
                          "(tDRO's DROTrainer); joined = measure all micro-batches together (None: micro for ratio).")
    reference_guard: Literal["sum", "mean"] = Field(
        "sum", description="ratio only: sum = the authors' guard (r_i / sum_j r_j below min_relative_reference: "
                           "normaliser 1); mean = the earlier rule (r_i / mean_j r_j below it: contributes 0).")
    min_relative_reference: float | None = Field(
        None, ge=0, description="ratio only: threshold of reference_guard (None = 1e-4 for sum, 0.2 for mean).")
    top_percents: list[int] = Field(default_factory=lambda: [10, 20, 30, 40, 50, 60, 70, 80, 90],
                                    description="K values of the top-K% selections written to weights.json.")

    def resolved(self, strategy: str = "tdro") -> "DROConfig":
        """A copy with every ``None`` replaced by the default of the (strategy's) measurement."""
        m = self.measurement or STRATEGY_MEASUREMENT.get(strategy, "ratio")
        lr, norm, smooth, out = _DEFAULTS[m]
        return self.model_copy(update={
            "measurement": m,
            "lr": self.lr if self.lr is not None else lr,
            "normalize_gradient": self.normalize_gradient if self.normalize_gradient is not None else norm,
            "smoothing": self.smoothing if self.smoothing is not None else smooth,
            "output": self.output or out,
            "absent": self.absent or ("previous" if m == "difference" else "renormalise"),
            "objective": self.objective or ("groups" if strategy == "groupdro" else "examples"),
            "mean_counts_initial": (self.mean_counts_initial if self.mean_counts_initial is not None
                                    else m == "difference"),
            "accumulation": self.accumulation or ("micro" if m == "ratio" else "joined"),
            "min_relative_reference": (self.min_relative_reference if self.min_relative_reference is not None
                                       else (1e-4 if self.reference_guard == "sum" else 0.2)),
        })


@dataclass
class Measured:
    """Per-collection statistics of one (global) batch."""

    measurement: np.ndarray      # [k] M_g (0 where absent)
    present: np.ndarray          # [k] bool: collection has at least one measured example
    proxy_loss: np.ndarray       # [k] mean proxy loss (nan where absent)
    reference_loss: np.ndarray   # [k] mean reference loss (nan where absent or no reference)
    counts: np.ndarray           # [k] examples per collection in the global batch
    ok: bool                     # False: non-finite or degenerate losses, skip the update
    reason: str = ""


def measure(proxy: np.ndarray, reference: np.ndarray | None, collection_ids: np.ndarray, k: int,
            measurement: Measurement, *, min_relative_reference: float = 1e-4,
            reference_guard: Literal["sum", "mean"] = "sum") -> Measured:
    """Per-collection measurement ``M_g`` (see the module docstring) of this rank's slice, all-reduced.

    ``proxy`` and ``reference`` are per-example losses ``[B]`` (float), ``collection_ids`` ints in ``[0, k)``.
    """
    proxy = np.asarray(proxy, dtype=np.float64)
    ids = np.asarray(collection_ids, dtype=np.int64)
    ref = None if reference is None else np.asarray(reference, dtype=np.float64)
    if measurement != "raw" and ref is None:
        raise ValueError(f"measurement {measurement!r} needs reference losses (set reference_model).")
    finite = np.isfinite(proxy).all() and (ref is None or np.isfinite(ref).all())
    bad = 0.0 if finite else 1.0
    p = np.where(np.isfinite(proxy), proxy, 0.0)
    r = None if ref is None else np.where(np.isfinite(ref), ref, 0.0)

    ref_mean = 0.0
    if measurement == "ratio":
        # The batch normaliser of the reference loss is global: sum and count over all ranks.
        s = all_reduce(np.array([r.sum(), float(len(r)), bad]))
        ref_mean = s[0] / s[1] if s[1] > 0 else 0.0
        bad = s[2]
        if ref_mean > 0 and bad == 0:
            norm = r / (ref_mean * s[1])                         # r~_i = r_i / sum_j r_j (the authors' L1 norm)
            if reference_guard == "sum":
                use = norm >= max(min_relative_reference, 1e-300)
                guarded = p if min_relative_reference > 0 else np.zeros_like(p)
                per_example = np.where(use, p / np.where(use, norm, 1.0), guarded)
            else:
                use = norm * s[1] >= max(min_relative_reference, 1e-300)
                per_example = np.where(use, p / np.where(use, norm, 1.0), 0.0)
            per_example = np.maximum(per_example, 0.0)           # the authors clamp at 0
            if min_relative_reference <= 0:   # plain ratio: leave zero-reference examples out entirely
                counted = use
            else:                              # authors: below-threshold examples count
                counted = np.ones_like(use)
        else:
            per_example, counted = np.zeros_like(p), np.ones(len(p), dtype=bool)
    elif measurement == "difference":
        per_example, counted = np.maximum(p - r, 0.0), np.ones(len(p), dtype=bool)
    else:
        per_example, counted = p, np.ones(len(p), dtype=bool)

    sums = np.zeros((4, k))
    np.add.at(sums[0], ids, per_example * counted)
    np.add.at(sums[1], ids, counted.astype(np.float64))
    np.add.at(sums[2], ids, p)
    np.add.at(sums[3], ids, 1.0)
    packed = np.concatenate([sums.ravel(), np.zeros(1) if r is None else np.bincount(ids, weights=r, minlength=k),
                             [bad]])
    packed = all_reduce(packed)
    sums = packed[: 4 * k].reshape(4, k)
    ref_sums = packed[4 * k: -1] if r is not None else None
    bad = packed[-1]
    counts = sums[3]
    with np.errstate(invalid="ignore", divide="ignore"):
        present = sums[1] > 0
        m = np.where(present, sums[0] / np.maximum(sums[1], 1.0), 0.0)
        proxy_mean = np.where(counts > 0, sums[2] / np.maximum(counts, 1.0), np.nan)
        ref_means = (np.full(k, np.nan) if ref_sums is None
                     else np.where(counts > 0, ref_sums / np.maximum(counts, 1.0), np.nan))
    if bad > 0:
        return Measured(np.zeros(k), np.zeros(k, bool), proxy_mean, ref_means, counts, False, "non-finite losses")
    if measurement == "ratio" and not ref_mean > 0:
        return Measured(np.zeros(k), np.zeros(k, bool), proxy_mean, ref_means, counts, False,
                        "the reference losses of the batch are all zero")
    if not np.isfinite(m).all():   # e.g. huge finite losses overflowing a ratio
        return Measured(np.zeros(k), np.zeros(k, bool), proxy_mean, ref_means, counts, False,
                        "non-finite measurement")
    return Measured(m, present, proxy_mean, ref_means, counts, True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    mx = x.max()
    return x - (mx + math.log(np.exp(x - mx).sum()))


def update_log_weights(log_weights: np.ndarray, measurement: np.ndarray, present: np.ndarray, *,
                       lr: float, normalize_gradient: bool, smoothing: float, max_grad_norm: float = 1.0) -> np.ndarray:
    """One exponentiated-gradient ascent step on normalised log-weights (returns new log-weights).

    With ``normalize_gradient`` the gradient is clipped at ``max_grad_norm`` as ``clip_grad_norm_`` does
    (factor ``max_grad_norm / (norm + 1e-6)`` when below 1). Only the collections in ``present`` move; they are
    re-normalised to keep their total mass, so an absent collection keeps its weight (pass every collection as
    present, with gradient 0 where absent, for the authors' softmax over all).
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    present = np.asarray(present, dtype=bool)
    if not present.any():
        return lw.copy()
    g = np.where(present, np.asarray(measurement, dtype=np.float64), 0.0)
    if normalize_gradient:
        norm = float(np.linalg.norm(g))
        if not norm > 0 or not math.isfinite(norm):
            return lw.copy()
        coef = max_grad_norm / (norm + 1e-6)
        if coef < 1.0:
            g = g * coef
    idx = np.flatnonzero(present)
    old = lw[idx]
    mass = old.max() + math.log(np.exp(old - old.max()).sum())          # log of the present mass
    new = log_softmax(old + lr * g[idx])                                 # normalised within present
    if smoothing > 0:
        new = np.log((1.0 - smoothing) * np.exp(new) + smoothing / len(idx))
    out = lw.copy()
    out[idx] = new + mass
    out = log_softmax(np.maximum(out, _MIN_LOG_WEIGHT + out.max()))
    return np.maximum(out, _MIN_LOG_WEIGHT)


def _combine(parts: list[Measured], accumulation_steps: int) -> Measured:
    """The micro-batches' measurements of one optimiser step: ``M`` summed and divided by the accumulation
    steps (tDRO's gradient accumulation), counts summed, mean losses weighted by counts; unusable if any is."""
    counts = sum(p.counts for p in parts)

    def mean_of(field: str) -> np.ndarray:
        tot = sum(np.nan_to_num(getattr(p, field)) * p.counts for p in parts)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, tot / np.maximum(counts, 1.0), np.nan)

    bad = [p.reason for p in parts if not p.ok]
    k = len(counts)
    if bad:
        return Measured(np.zeros(k), np.zeros(k, bool), mean_of("proxy_loss"), mean_of("reference_loss"), counts,
                        False, bad[0])
    return Measured(sum(p.measurement for p in parts) / accumulation_steps,
                    np.logical_or.reduce([p.present for p in parts]), mean_of("proxy_loss"),
                    mean_of("reference_loss"), counts, True)


def top_k_selection(names: list[str], weights: np.ndarray, percent: float) -> list[str]:
    """Names of the ``max(1, floor(k * percent / 100))`` highest-weight collections (ties: input order)."""
    n = max(1, math.floor(len(names) * float(percent) / 100 + 1e-9))
    order = sorted(range(len(names)), key=lambda i: (-float(weights[i]), i))
    return [names[i] for i in order[:n]]


class DROStrategy(Strategy):
    """tDRO / DoReMi / GroupDRO: learned collection weights from a proxy (and a frozen reference) model.

    Sampling stays uniform (stage 1 uses mixed batches with an equal share of every collection); the
    learned weights act on the loss and are what :meth:`final_weights` writes for transfer.
    """

    def __init__(self, config: DROConfig | None = None, *, strategy: str = "tdro") -> None:
        self.strategy_name = strategy
        self.config = (config or DROConfig()).resolved(strategy)
        self.name = strategy

    # -- Strategy hooks -------------------------------------------------------------------------------------
    def setup(self, collection_names: list[str], collection_sizes: list[int]) -> None:
        super().setup(collection_names, collection_sizes)
        k = len(self.collection_names)
        self.log_weights = np.full(k, -math.log(k))
        self.mean_weights = np.full(k, 1.0 / k)
        self.ema_weights = np.full(k, 1.0 / k)
        self.last_scores = np.zeros(k)    # each collection's last measurement (absent: previous)
        self.n_steps = 0          # loss() calls (each one is a step of the weights, possibly skipped)
        self.n_skipped = 0
        self.last: Measured | None = None
        self._pending: list = []      # micro-batch measurements of the current optimiser step

    @property
    def weights(self) -> np.ndarray:
        """Current learned weights (sum to 1)."""
        return np.exp(log_softmax(self.log_weights))

    def sampling_weights(self) -> np.ndarray:
        n = len(self.collection_names)
        return np.full(n, 1.0 / n)

    def loss(self, losses: torch.Tensor, batch: Batch, ctx: StepContext) -> torch.Tensor:
        """Measure the batch, update the weights, return the loss weighted by the updated weights.

        Under gradient accumulation (``ctx.accumulation_steps > 1``) the measurement of the
        micro-batches is collected and the weights step once, at the last micro-batch of the optimiser step.
        """
        ref = None
        if self.config.measurement != "raw":
            if ctx.reference_losses is None:
                raise RuntimeError(f"strategy {self.name!r} needs a reference model (--reference-model).")
            ref = ctx.reference_losses(batch).detach().float().cpu().numpy()
        proxy = losses.detach().float().cpu().numpy()
        ids = np.asarray(batch.collection_ids)
        accum = max(int(ctx.accumulation_steps), 1)
        micro = int(ctx.micro_step)
        if accum > 1 and self.config.accumulation == "micro":
            # tDRO's DROTrainer: each micro-batch's measurement is added into the weights' gradient
            if micro == 0:
                self._pending = []
            self._pending.append(self._measure(proxy, ref, ids))
            if micro == accum - 1:
                parts, self._pending = self._pending, []
                self._apply(_combine(parts, accum))
        elif accum > 1:
            if micro == 0:
                self._pending = []
            self._pending.append((proxy, ref, ids))
            if micro == accum - 1:
                parts = self._pending
                self._pending = []
                self.step_weights(np.concatenate([x[0] for x in parts]),
                                  None if ref is None else np.concatenate([x[1] for x in parts]),
                                  np.concatenate([x[2] for x in parts]))
        else:
            self.step_weights(proxy, ref, ids)
        if not np.isfinite(proxy).all():
            # Never back-propagate a non-finite loss: a zero that reaches no model parameter.
            return torch.zeros((), dtype=losses.dtype, device=losses.device, requires_grad=True)
        if self.config.objective == "groups":
            return self.group_loss(losses, ids, world_size=ctx.world_size)
        return self.weighted_loss(losses, ids, world_size=ctx.world_size)

    def _measure(self, proxy: np.ndarray, reference: np.ndarray | None, collection_ids: np.ndarray) -> Measured:
        cfg = self.config
        return measure(proxy, reference, collection_ids, len(self.collection_names), cfg.measurement,
                       min_relative_reference=cfg.min_relative_reference, reference_guard=cfg.reference_guard)

    def step_weights(self, proxy: np.ndarray, reference: np.ndarray | None, collection_ids: np.ndarray) -> Measured:
        """Measure and update the weights from per-example losses (the weight half of :meth:`loss`)."""
        return self._apply(self._measure(proxy, reference, collection_ids))

    def _apply(self, m: Measured) -> Measured:
        """One step of the weights from a measurement (skipped, with a warning, when it is not usable)."""
        cfg = self.config
        if m.ok:
            scores = m.measurement
            if cfg.absent == "previous":      # DoReMi: an absent domain's score is its previous one
                scores = np.where(m.present, m.measurement, self.last_scores)
                self.last_scores = scores.copy()
            present = m.present if cfg.absent == "keep" else np.ones_like(m.present)
            self.log_weights = update_log_weights(self.log_weights, scores, present, lr=cfg.lr,
                                                  normalize_gradient=cfg.normalize_gradient, smoothing=cfg.smoothing,
                                                  max_grad_norm=cfg.max_grad_norm)
        else:
            self.n_skipped += 1
            log.warning("%s: skipped the weight update at step %d (%s); weights unchanged.",
                        self.name, self.n_steps + 1, m.reason)
        w = self.weights
        self.n_steps += 1
        terms = self.n_steps + 1 if cfg.mean_counts_initial else self.n_steps   # DoReMi counts the initial weights
        self.mean_weights = self.mean_weights + (w - self.mean_weights) / terms
        self.ema_weights = (1.0 - cfg.ema) * self.ema_weights + cfg.ema * w
        self.last = m
        return m

    def weighted_loss(self, losses: torch.Tensor, collection_ids: np.ndarray, *, world_size: int = 1) -> torch.Tensor:
        """``sum_i alpha_{g(i)} l_i / sum_i alpha_{g(i)}`` over the global batch (this rank's share of it)."""
        w = torch.as_tensor(self.weights[np.asarray(collection_ids, dtype=np.int64)], dtype=losses.dtype,
                            device=losses.device)
        total = float(all_reduce(np.array([float(w.sum())]))[0]) if world_size > 1 else float(w.sum())
        # DDP averages gradients over ranks, hence the factor world_size.
        return (losses * w).sum() * (world_size / max(total, 1e-300))

    def group_loss(self, losses: torch.Tensor, collection_ids: np.ndarray, *, world_size: int = 1) -> torch.Tensor:
        """``sum_g alpha_g mean_{i in g} l_i`` over the global batch (GroupDRO's ``group_loss @ adv_probs``): a
        collection absent from the batch contributes 0 and the weights of the present ones are not renormalised."""
        ids = np.asarray(collection_ids, dtype=np.int64)
        k = len(self.collection_names)
        counts = np.bincount(ids, minlength=k).astype(np.float64)
        if world_size > 1:
            counts = all_reduce(counts)
        scale = self.weights / np.maximum(counts, 1.0)          # alpha_g / n_g (n_g over the global batch)
        w = torch.as_tensor(scale[ids], dtype=losses.dtype, device=losses.device)
        # DDP averages gradients over ranks, hence the factor world_size.
        return (losses * w).sum() * world_size

    def trajectory_record(self, step: int) -> dict | None:
        if self.last is None:
            return None
        names = self.collection_names

        def named(values: np.ndarray, mask: np.ndarray | None = None) -> dict:
            return {n: (None if (mask is not None and not mask[i]) or not math.isfinite(float(values[i]))
                        else float(values[i])) for i, n in enumerate(names)}

        m = self.last
        return {"step": int(step), "weights": named(self.weights),
                "proxy_loss": named(m.proxy_loss), "reference_loss": named(m.reference_loss),
                "measurement": named(m.measurement, m.present), "counts": {n: int(c) for n, c in zip(names, m.counts)},
                "skipped": not m.ok}

    def output_weights(self) -> np.ndarray:
        return {"final": self.weights, "mean": self.mean_weights, "ema": self.ema_weights}[self.config.output]

    def final_weights(self) -> dict:
        names = self.collection_names
        out = self.output_weights()

        def named(v: np.ndarray) -> dict:
            return {n: float(x) for n, x in zip(names, v)}

        return {
            "collections": list(names),
            "weights": [float(x) for x in out],
            "strategy": self.name,
            "measurement": self.config.measurement,
            "output": self.config.output,
            "steps": self.n_steps,
            "skipped_steps": self.n_skipped,
            "final": named(self.weights),
            "mean": named(self.mean_weights),
            "ema": named(self.ema_weights),
            "top": {str(p): top_k_selection(names, out, p) for p in self.config.top_percents},
        }

    def state_dict(self) -> dict:
        return {"log_weights": self.log_weights.tolist(), "mean_weights": self.mean_weights.tolist(),
                "ema_weights": self.ema_weights.tolist(), "n_steps": self.n_steps, "n_skipped": self.n_skipped,
                "last_scores": self.last_scores.tolist(), "collections": list(self.collection_names)}

    def load_state_dict(self, state: dict) -> None:
        names = list(state.get("collections", self.collection_names))
        if names != list(self.collection_names):
            from drmix.errors import CheckpointError
            raise CheckpointError(f"checkpoint was trained on collections {names}, not {self.collection_names}.",
                                  fix="resume with the same training collections, or start a new output_dir.")
        self.log_weights = np.asarray(state["log_weights"], dtype=np.float64)
        self.mean_weights = np.asarray(state["mean_weights"], dtype=np.float64)
        self.ema_weights = np.asarray(state["ema_weights"], dtype=np.float64)
        self.n_steps = int(state["n_steps"])
        self.n_skipped = int(state.get("n_skipped", 0))
        self.last_scores = np.asarray(state.get("last_scores", np.zeros(len(self.collection_names))), dtype=np.float64)


def build_dro_strategy(strategy: str, config: DROConfig | None = None) -> DROStrategy:
    """The strategy for ``TrainConfig.strategy`` in {"tdro", "doremi", "groupdro"}."""
    if strategy not in STRATEGY_MEASUREMENT:
        from drmix.errors import ConfigError
        raise ConfigError(f"unknown DRO strategy {strategy!r}.", fix=f"use one of {sorted(STRATEGY_MEASUREMENT)}.")
    return DROStrategy(config, strategy=strategy)


def _build(config, options: DROConfig | None, names: list[str], weights: list) -> DROStrategy:
    return build_dro_strategy(config.mixture.strategy.lower(), options)


def _reference_needed(name: str):
    """Whether the options' measurement (the strategy's own when unset) compares with a reference."""
    return lambda options: (options or DROConfig()).resolved(name).measurement != "raw"


_SPECS = {name: register_strategy(StrategySpec(
    name=name, build=_build, options=DROConfig, options_field="dro", family="dro", help=text, paper=paper,
    card_text=card, needs_reference=STRATEGY_MEASUREMENT[name] != "raw", reference_needed=_reference_needed(name),
    learns_weights=True, requires_mixed_batches=True, docs="docs/mixture.md"))
    for name, paper, text, card in (
        ("tdro", TDRO, "tDRO: learn collection weights from the proxy/reference loss ratio (options: --dro).",
         "learned by task-level DRO (tDRO): exponentiated-gradient ascent on the proxy/reference loss ratio"),
        ("doremi", DOREMI, "DoReMi: learn collection weights from the excess loss over a reference (--dro).",
         "learned by DoReMi: excess loss of a proxy over a frozen reference model"),
        ("groupdro", GROUPDRO, "GroupDRO: learn collection weights from the raw loss (--dro).",
         "learned by GroupDRO: exponentiated group losses"))}
