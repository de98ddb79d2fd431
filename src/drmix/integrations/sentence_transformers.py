"""drmix's dataset mixtures inside sentence-transformers' own trainer (``SentenceTransformerTrainer``).

A team that trains with ``SentenceTransformerTrainer`` on a multi-dataset ``DatasetDict`` keeps its script,
its losses, its callbacks and HF's distributed back ends, and gets drmix's mixtures through the trainer's
own extension points:

* :func:`mixture` -> :class:`Mixture`: the weights each batch's dataset is drawn with -- static
  (``uniform``, ``size``, ``temperature``: :func:`drmix.mixture.static.initial_weights`), given
  (``{name: weight}``), a ``weights.json`` of ``drmix mixture optimize`` / ``drmix train --strategy
  tdro|doremi|groupdro`` (:func:`drmix.mixture.transfer.read_weights_file`), or a tDRO transfer of such a file
  (``top:0.7``, ``reweight``, ``loss``: :func:`drmix.mixture.transfer.build_transfer_strategy`).
  ``Mixture.batch_sampler()`` goes to ``SentenceTransformerTrainingArguments(multi_dataset_batch_sampler=...)``;
  ``Mixture.wrap_loss(loss)`` adds the per-dataset loss scales of the ``loss`` transfer (the plain loss
  otherwise).
* :class:`MixtureBatchSampler`: a ``sentence_transformers``' ``MultiDatasetDefaultBatchSampler`` (the base of its
  ``ProportionalBatchSampler`` and ``RoundRobinBatchSampler``) that draws each batch's dataset from the
  weights, i.i.d., and takes the batch from that dataset's own batch sampler -- the one the trainer built
  from ``batch_sampler=`` (``NO_DUPLICATES`` included), so within-dataset batching stays sentence-transformers'.
* :class:`MixtureDRO`: GroupDRO or DoReMi run online on the per-dataset losses of the training: a trainer
  callback plus a loss wrapper (``loss=dro.wrap_loss(loss), callbacks=[dro]``). The weight updates are
  drmix's own (:class:`drmix.mixture.dro.DROStrategy`: :func:`~drmix.mixture.dro.measure` and
  :func:`~drmix.mixture.dro.update_log_weights`), not a second implementation.

How the DRO objective is carried over. sentence-transformers' multi-dataset batches hold one dataset each
and its losses return one scalar per batch, so the unit of measurement is the **batch**: the batch of
dataset ``g`` contributes one value ``l`` (its loss) -- and for DoReMi ``r``, the reference's loss on the
same batch (a frozen loss module run under ``no_grad``) or a fixed per-dataset reference loss. Every
``gradient_accumulation_steps * update_every`` training forwards the recorded values are measured together
(drmix's ``accumulation: joined``: ``M_g`` = mean over the window's batches of ``g`` of ``l`` for GroupDRO,
of ``max(l - r, 0)`` for DoReMi -- a batch-level clamp where drmix's own trainer clamps per example) and the
weights take one step; a dataset without a batch in the window gets gradient 0 and shares the
renormalisation (``absent: renormalise``: GroupDRO's ``q <- q exp(eta M) / Z``; ``keep`` would never move a
weight when a window holds one dataset, and is refused). The loss of a batch of ``g`` is multiplied by
``q_g / p_g`` (``p_g``: the probability the batch sampler draws ``g`` with), so the expected loss is drmix's
objective ``sum_g q_g L_g`` -- with uniform sampling ``k q_g``, the scale of the ``loss`` transfer; the
weights start uniform, so the first scale is 1. The weight update of a window happens at its last forward,
before that batch is scaled (the paper's order: update, then descend on the updated objective).

Outputs (``args.output_dir``, rank 0): ``weights.jsonl`` (a line per update: the weights, the window's
per-dataset losses and measurements, as drmix's trainer writes it, so ``drmix report`` draws the
trajectory) and, at the end, ``weights.json`` in drmix's format (``collections``, ``weights``, ``final``,
``mean``, ``ema``, ``top``): ``drmix train --transfer`` and :func:`mixture` read it. An existing
``weights.json``/``weights.jsonl`` in ``output_dir`` is refused unless ``overwrite=True``. Each checkpoint
gets ``drmix_mixture.json`` (the strategy's state), which ``resume_from_checkpoint`` reads back, so a
resumed run continues the weights exactly.

What stays drmix-only (docs/integrations.md): tDRO's stage 1 (its measurement divides each *example's*
proxy loss by a reference loss normalised over a *mixed* batch spanning every collection; here batches hold
one dataset and losses are one scalar per batch) and Inf-DDS (look-ahead forward/backward passes and
Reptile steps on dev batches inside the optimiser step, which a callback cannot run).

Hand-written: sentence-transformers has no weighted multi-dataset sampler and no online DRO; the sampler
subclasses its base class, the rest is the glue between the trainer's hooks and drmix's strategies.
"""
from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers.base.sampler import MultiDatasetDefaultBatchSampler
from transformers import TrainerCallback

from drmix.errors import CheckpointError, ConfigError

log = logging.getLogger(__name__)

STATE_FILE = "drmix_mixture.json"     # in each checkpoint folder
WEIGHTS_FILE = "weights.json"
TRAJECTORY_FILE = "weights.jsonl"
STATIC = ("uniform", "size", "temperature")


def _datasets(train_dataset: Mapping[str, Any] | Sequence[str]) -> tuple[list[str], list[int]]:
    """Names and sizes of a ``DatasetDict`` (or any ``{name: dataset}``), in the trainer's order."""
    if not isinstance(train_dataset, Mapping) or not train_dataset:
        raise ConfigError("a multi-dataset mixture needs the training DatasetDict ({name: Dataset}).",
                          fix="pass the same DatasetDict you give SentenceTransformerTrainer(train_dataset=...).")
    names = [str(n) for n in train_dataset]
    sizes = [len(d) for d in train_dataset.values()]
    empty = [n for n, s in zip(names, sizes) if s == 0]
    if empty:
        raise ConfigError(f"training dataset(s) {empty} are empty.", fix="drop them from the DatasetDict.")
    return names, sizes


def _normalised(w: Sequence[float] | np.ndarray, names: list[str], what: str) -> np.ndarray:
    arr = np.asarray(w, dtype=np.float64)
    if arr.shape != (len(names),):
        raise ConfigError(f"{what}: {arr.size} weights for the {len(names)} datasets {names}.",
                          fix="give one weight per dataset of the DatasetDict, in its order, or a {name: weight} "
                              "mapping.")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or not np.any(arr > 0):
        raise ConfigError(f"{what}: weights {arr.tolist()} are not non-negative numbers with a positive sum.",
                          fix="give each dataset a weight >= 0, at least one > 0.")
    from drmix.data.sampling import sum_to_one

    return sum_to_one(arr)


# ------------------------------------------------------------------------------------------------ sampler

class MixtureBatchSampler(MultiDatasetDefaultBatchSampler):
    """Each batch's dataset drawn i.i.d. from ``weights``; the batch itself from that dataset's batch sampler.

    ``weights``: one per dataset of the ``ConcatDataset``, in the ``DatasetDict``'s order (normalised).
    A dataset whose batch sampler runs out starts a new pass (a fresh shuffle: its sampler's epoch is
    advanced) instead of ending the epoch, so the draws keep following the weights. ``num_batches``: batches
    per epoch (default: the total of the datasets' batch counts, the epoch of ``ProportionalBatchSampler``).
    The draws come from a numpy generator seeded by ``(seed, epoch)``: an epoch is the same sequence on
    every run and every process, and the trainer's skip of already-trained batches on resume replays it.
    Pass :meth:`factory` (or :meth:`Mixture.batch_sampler`) as ``multi_dataset_batch_sampler``.
    """

    def __init__(self, dataset, batch_samplers: list, generator: torch.Generator | None = None, seed: int = 0, *,
                 weights: Sequence[float], num_batches: int | None = None) -> None:
        super().__init__(dataset, batch_samplers=batch_samplers, generator=generator, seed=seed)
        names = [f"dataset {i}" for i in range(len(batch_samplers))]
        self.weights = _normalised(weights, names, "MixtureBatchSampler")
        empty = [i for i, (w, s) in enumerate(zip(self.weights, batch_samplers)) if w > 0 and len(s) == 0]
        if empty:
            raise ConfigError(f"dataset(s) {empty} of the DatasetDict yield no batch (fewer rows than the batch size "
                              "with dataloader_drop_last) but have a positive weight.",
                              fix="lower the batch size, turn off dataloader_drop_last, or give them weight 0.")
        self.num_batches = num_batches
        self.passes = [0] * len(batch_samplers)

    @classmethod
    def factory(cls, weights: Sequence[float], num_batches: int | None = None) -> "MixtureBatchSamplerFactory":
        """What ``multi_dataset_batch_sampler=`` takes: called by the trainer with the ``ConcatDataset``, the
        per-dataset batch samplers, its generator and seed (a picklable object: the trainer saves its
        arguments with every checkpoint)."""
        return MixtureBatchSamplerFactory(tuple(map(float, weights)), num_batches)

    def _restart(self, d: int):
        sampler = self.batch_samplers[d]
        self.passes[d] += 1
        if hasattr(sampler, "set_epoch"):
            # a new shuffle for the next pass: samplers that reseed from their epoch would repeat the order
            sampler.set_epoch(self.epoch + self.passes[d] * 100_003)
        return iter(sampler)

    def __iter__(self):
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in self.dataset.datasets])]).astype(np.int64)
        self.passes = [0] * len(self.batch_samplers)
        for i, s in enumerate(self.batch_samplers):
            if hasattr(s, "set_epoch"):
                s.set_epoch(self.epoch)
        iters = [iter(s) for s in self.batch_samplers]
        rng = np.random.default_rng([int(self.seed or 0), int(self.epoch), 65537])
        choices = rng.choice(len(self.weights), size=len(self), p=self.weights)
        for d in choices:
            d = int(d)
            try:
                batch = next(iters[d])
            except StopIteration:
                iters[d] = self._restart(d)
                batch = next(iters[d])
            yield [int(i) + int(offsets[d]) for i in batch]

    def __len__(self) -> int:
        if self.num_batches is not None:
            return int(self.num_batches)
        return sum(len(s) for s in self.batch_samplers)


@dataclass(frozen=True)
class MixtureBatchSamplerFactory:
    """Builds a :class:`MixtureBatchSampler` when the trainer makes its data loader."""

    weights: tuple[float, ...]
    num_batches: int | None = None

    def __call__(self, dataset, batch_samplers, generator=None, seed=0) -> MixtureBatchSampler:
        return MixtureBatchSampler(dataset, batch_samplers, generator=generator, seed=seed, weights=self.weights,
                                   num_batches=self.num_batches)


# ------------------------------------------------------------------------------------------------ mixture

@dataclass
class Mixture:
    """Weights over the datasets of a ``DatasetDict`` (see :func:`mixture`)."""

    names: list[str]
    sampling: np.ndarray                       # probability of each dataset for a batch
    loss_scales: np.ndarray | None = None      # per-dataset loss factors (the ``loss`` transfer), or None
    info: dict[str, Any] = field(default_factory=dict)

    def batch_sampler(self, num_batches: int | None = None) -> MixtureBatchSamplerFactory:
        """For ``SentenceTransformerTrainingArguments(multi_dataset_batch_sampler=...)``."""
        return MixtureBatchSampler.factory(self.sampling.tolist(), num_batches)

    def wrap_loss(self, loss: torch.nn.Module | Mapping[str, torch.nn.Module]):
        """The loss to give the trainer: unchanged without loss scales, else ``{name: loss scaled by s_name}``
        (a dict makes the trainer route each batch to its dataset's entry)."""
        if self.loss_scales is None:
            return loss
        bases = _per_dataset(loss, self.names)
        return {n: _ScaledLoss(bases[n], float(s)) for n, s in zip(self.names, self.loss_scales)}

    def as_dict(self) -> dict[str, Any]:
        out = {"collections": list(self.names), "weights": self.sampling.tolist(), **self.info}
        if self.loss_scales is not None:
            out["loss_scales"] = self.loss_scales.tolist()
        return out


def mixture(train_dataset: Mapping[str, Any], mixture: str = "uniform", *, temperature: float = 2.0,
            weights: Mapping[str, float] | Sequence[float] | None = None, weights_file: str | Path | None = None,
            transfer: str | None = None) -> Mixture:
    """The mixture over ``train_dataset``'s datasets (a ``DatasetDict``).

    ``mixture``: ``uniform`` / ``size`` / ``temperature`` (``|D|^(1/temperature)``), used when neither
    ``weights`` nor ``weights_file`` is given. ``weights``: ``{name: weight}`` or a list in the
    DatasetDict's order. ``weights_file``: a drmix ``weights.json`` (its ``weights``) or a ``{name: weight}``
    JSON/YAML file; with ``transfer`` (``top:0.7``, ``reweight``, ``loss``) the learned weights are transferred
    as tDRO's stage 2 does (:mod:`drmix.mixture.transfer`). Names must match the DatasetDict's keys.
    """
    names, sizes = _datasets(train_dataset)
    given = sum(x is not None for x in (weights, weights_file))
    if given > 1:
        raise ConfigError("give the weights once: weights= or weights_file=, not both.", fix="drop one of them.")
    if transfer is not None:
        if weights_file is None:
            raise ConfigError("a transfer needs learned weights: weights_file= (a weights.json from drmix mixture "
                              "optimize).", fix="pass weights_file='RUN/weights.json'.")
        from drmix.mixture.transfer import build_transfer_strategy

        strategy = build_transfer_strategy(str(weights_file), transfer, names)
        strategy.setup(names, sizes)
        scales = strategy.loss_scales()
        final = strategy.final_weights()
        info = {k: v for k, v in final.items() if k not in ("collections", "weights", "loss_scales")}
        return Mixture(names, strategy.sampling_weights(), None if np.allclose(scales, 1.0) else scales,
                       {"source": "transfer", **info})
    if weights_file is not None:
        from drmix.mixture.static import file_mixture_weights

        return Mixture(names, file_mixture_weights(weights_file, names), None,
                       {"source": "weights_file", "weights_file": str(weights_file)})
    if weights is not None:
        if isinstance(weights, Mapping):
            from drmix.mixture.transfer import align_weights

            w = align_weights({str(k): float(v) for k, v in weights.items()}, names)
        else:
            w = _normalised(weights, names, "weights")
        return Mixture(names, w, None, {"source": "given"})
    if mixture not in STATIC:
        raise ConfigError(f"unknown mixture {mixture!r}.", fix=f"use one of {', '.join(STATIC)}, or pass weights= / "
                                                            "weights_file=.")
    from drmix.mixture.static import initial_weights

    return Mixture(names, initial_weights(sizes, mixture, temperature=temperature), None,
                   {"source": mixture, **({"temperature": temperature} if mixture == "temperature" else {})})


# ------------------------------------------------------------------------------------------------- losses

def _per_dataset(loss, names: list[str]) -> dict[str, torch.nn.Module]:
    if isinstance(loss, Mapping):
        missing = [n for n in names if n not in loss]
        if missing:
            raise ConfigError(f"the loss dict has no entry for dataset(s) {missing}.",
                              fix="give one loss per dataset of the DatasetDict, or a single loss.")
        return {n: loss[n] for n in names}
    if not isinstance(loss, torch.nn.Module):
        raise ConfigError(f"the loss must be a torch.nn.Module (a sentence-transformers loss), got {type(loss).__name__}.",
                          fix="build the loss with the model first, e.g. MultipleNegativesRankingLoss(model).")
    return dict.fromkeys(names, loss)


def _scale(out, factor: float):
    if isinstance(out, dict):
        return {k: v * factor for k, v in out.items()}
    return out * factor


def _total(out) -> torch.Tensor:
    return torch.stack([v for v in out.values()]).sum() if isinstance(out, dict) else out


class _ScaledLoss(torch.nn.Module):
    """``factor *`` a sentence-transformers loss (training and evaluation alike)."""

    def __init__(self, base: torch.nn.Module, factor: float) -> None:
        super().__init__()
        self.base = base
        self.factor = factor

    @property
    def model(self):  # the trainer swaps the DDP/compiled model into the base loss through this
        return self.base.model

    def forward(self, features, labels):
        return _scale(self.base(features, labels), self.factor)


class _DROLoss(torch.nn.Module):
    """A dataset's loss under :class:`MixtureDRO`: records the batch's loss, returns it scaled by ``q_g / p_g``."""

    def __init__(self, base: torch.nn.Module, index: int, dro: "MixtureDRO") -> None:
        super().__init__()
        self.base = base
        self.index = index
        object.__setattr__(self, "_dro", dro)   # not a submodule: the trainer must not move or recurse into it

    @property
    def model(self):
        return self.base.model

    def forward(self, features, labels):
        dro = self._dro
        training = torch.is_grad_enabled()   # evaluation losses run under no_grad: plain, not recorded
        ref = dro._reference_loss(self.index, features, labels) if training else None
        out = self.base(features, labels)
        if not training:
            return out
        factor = dro._record(self.index, float(_total(out).detach().float()), ref)
        return _scale(out, factor)


# ---------------------------------------------------------------------------------------------------- DRO

def _dro_config(strategy: str, options: Mapping[str, Any] | Any | None) -> Any:
    """The :class:`~drmix.mixture.dro.DROConfig` of :class:`MixtureDRO` (``strategy``: groupdro or doremi)."""
    from drmix.mixture.dro import DROConfig, STRATEGY_MEASUREMENT

    if strategy == "tdro":
        raise ConfigError("tDRO's stage 1 cannot run inside sentence-transformers' trainer: its measurement "
                          "divides each example's loss by a reference loss normalised over a mixed batch of "
                          "every collection, and sentence-transformers' batches hold one dataset and its losses "
                          "return one number per batch (docs/integrations.md).",
                          fix="learn the weights with `drmix mixture optimize` (or drmix train --strategy tdro) "
                              "and transfer them here with mixture(train_dataset, weights_file=..., transfer=...); "
                              "or use groupdro / doremi.")
    if strategy not in ("groupdro", "doremi"):
        raise ConfigError(f"unknown online mixture strategy {strategy!r}.", fix="use groupdro or doremi.")
    if isinstance(options, DROConfig):
        config = options
    else:
        try:
            config = DROConfig(**dict(options or {}))
        except Exception as e:  # pydantic's ValidationError: name the option
            raise ConfigError(f"invalid DRO option: {e}".splitlines()[0],
                              fix=f"valid options: {', '.join(DROConfig.model_fields)} (docs/mixture.md).") from None
    if config.measurement is not None and config.measurement != STRATEGY_MEASUREMENT[strategy]:
        raise ConfigError(f"measurement {config.measurement!r} does not belong to {strategy}.",
                          fix="drop the measurement option (it follows from the strategy).")
    if config.absent == "keep":
        raise ConfigError("absent='keep' never moves a weight here: a window of one-dataset batches often holds "
                          "one dataset.", fix="drop the absent option (renormalise is used).")
    if config.accumulation == "micro":
        raise ConfigError("accumulation='micro' is not available here: the window's batches are measured "
                          "together (joined).", fix="drop the accumulation option.")
    return config


def _dro_reference(strategy: str, reference: Any, names: list[str]) -> tuple[np.ndarray | None, Any]:
    """DoReMi's reference of :class:`MixtureDRO`: ``(per-dataset losses, None)`` or ``(None, frozen loss module)``;
    ``(None, None)`` for GroupDRO."""
    if strategy != "doremi":
        if reference is not None:
            raise ConfigError("GroupDRO measures the raw loss and takes no reference.", fix="drop reference=.")
        return None, None
    if reference is None:
        raise ConfigError("DoReMi measures the excess loss over a reference: pass reference= (a loss built on "
                          "a frozen reference model, or {dataset: reference loss}).",
                          fix="e.g. reference=MultipleNegativesRankingLoss(reference_model), or use groupdro.")
    if isinstance(reference, Mapping):
        missing = [n for n in names if n not in reference]
        if missing:
            raise ConfigError(f"reference losses are missing for dataset(s) {missing}.",
                              fix="give a reference loss for every dataset of the DatasetDict.")
        return np.array([float(reference[n]) for n in names]), None
    if isinstance(reference, torch.nn.Module):
        for p in reference.parameters():
            p.requires_grad_(False)
        return None, reference
    raise ConfigError(f"reference must be a loss module or a mapping, got {type(reference).__name__}.",
                      fix="pass MultipleNegativesRankingLoss(reference_model) or {dataset: loss}.")


def _dro_sampling(sampling: str | Sequence[float] | Mapping[str, float], names: list[str],
                  sizes: list[int]) -> np.ndarray:
    """The probabilities :class:`MixtureDRO` draws datasets with (each positive: its loss is divided by it)."""
    if isinstance(sampling, str):
        if sampling not in ("uniform", "size"):
            raise ConfigError(f"unknown sampling {sampling!r}.", fix="use uniform, size, a list or a mapping.")
        from drmix.mixture.static import initial_weights

        sampling = initial_weights(sizes, sampling)
    elif isinstance(sampling, Mapping):
        from drmix.mixture.transfer import align_weights

        sampling = align_weights({str(k): float(v) for k, v in sampling.items()}, names)
    else:
        sampling = _normalised(sampling, names, "sampling")
    if np.any(sampling <= 0):
        raise ConfigError("every dataset needs a positive sampling probability under DRO (its loss is divided "
                          "by it).", fix="give every dataset a positive sampling weight.")
    return sampling


class MixtureDRO(TrainerCallback):
    """GroupDRO / DoReMi online in a ``SentenceTransformerTrainer`` (see the module docstring).

    Usage::

        dro = MixtureDRO(train_dataset, "groupdro")
        args = SentenceTransformerTrainingArguments(output_dir="out", multi_dataset_batch_sampler=dro.batch_sampler())
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train_dataset,
                                             loss=dro.wrap_loss(MultipleNegativesRankingLoss(model)), callbacks=[dro])

    Args:
        train_dataset: the training ``DatasetDict`` (its keys name the datasets).
        strategy: ``groupdro`` (the raw loss) or ``doremi`` (the excess over a reference, needs ``reference``).
        options: :class:`drmix.mixture.dro.DROConfig` fields (``lr``, ``smoothing``, ``output``, ``ema``, ...;
            defaults from the papers as in drmix; ``absent`` must stay ``renormalise``).
        reference: DoReMi's reference: a sentence-transformers loss module built on a frozen reference model
            (run on each batch under ``no_grad``), or ``{name: loss}`` fixed per-dataset reference losses.
        sampling: the probabilities batches' datasets are drawn with (``uniform``, ``size``, a list or a
            mapping); :meth:`batch_sampler` draws exactly these. Default uniform.
        update_every: optimiser steps per weight update (the window's batches are measured together).
        weights_dir: where ``weights.json`` / ``weights.jsonl`` go (default: the trainer's ``output_dir``).
        overwrite: replace an existing ``weights.json`` / ``weights.jsonl`` there.
    """

    def __init__(self, train_dataset: Mapping[str, Any], strategy: str = "groupdro", *,
                 options: Mapping[str, Any] | Any | None = None,
                 reference: torch.nn.Module | Mapping[str, float] | None = None,
                 sampling: str | Sequence[float] | Mapping[str, float] = "uniform", update_every: int = 1,
                 weights_dir: str | Path | None = None, overwrite: bool = False) -> None:
        from drmix.mixture.dro import build_dro_strategy

        self.names, self.sizes = _datasets(train_dataset)
        strategy = str(strategy).lower()
        config = _dro_config(strategy, options)
        self.strategy_name = strategy
        self.strategy = build_dro_strategy(strategy, config.model_copy(update={"absent": "renormalise",
                                                                               "accumulation": "joined"}))
        self.strategy.setup(self.names, self.sizes)
        self._reference_values, self._reference_module = _dro_reference(strategy, reference, self.names)
        self.sampling = _dro_sampling(sampling, self.names, self.sizes)
        if int(update_every) < 1:
            raise ConfigError(f"update_every must be >= 1, got {update_every}.", fix="use 1 (every step) or more.")
        self.update_every = int(update_every)
        self.weights_dir = None if weights_dir is None else Path(weights_dir)
        self.overwrite = overwrite
        self.accumulation_steps: int | None = None   # set by on_train_begin
        self._forwards = 0
        self._window: list[tuple[int, float, float | None]] = []
        self._pending_records: list[dict] = []
        self._rank_zero = True

    # -- what the script passes to the trainer ---------------------------------------------------------------
    def batch_sampler(self, num_batches: int | None = None) -> MixtureBatchSamplerFactory:
        """A :class:`MixtureBatchSampler` factory drawing datasets with this object's ``sampling``."""
        return MixtureBatchSampler.factory(self.sampling.tolist(), num_batches)

    def wrap_loss(self, loss: torch.nn.Module | Mapping[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:
        """``{name: loss}`` for ``SentenceTransformerTrainer(loss=...)``: each records its batch's loss for the
        weight update and returns it scaled by ``q_name / p_name``."""
        bases = _per_dataset(loss, self.names)
        return {n: _DROLoss(bases[n], i, self) for i, n in enumerate(self.names)}

    @property
    def weights(self) -> dict[str, float]:
        """The current weights ``q`` by dataset name."""
        return {n: float(w) for n, w in zip(self.names, self.strategy.weights)}

    # -- the loss side ---------------------------------------------------------------------------------------
    def _reference_loss(self, index: int, features, labels) -> float | None:
        if self._reference_values is not None:
            return float(self._reference_values[index])
        if self._reference_module is None:
            return None
        ref = self._reference_module
        device = next((p.device for p in ref.parameters()), None)
        with torch.no_grad():
            copies = [dict(f) for f in features]   # the model writes its outputs into the feature dicts
            if device is not None:
                copies = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in f.items()} for f in copies]
            was = [m.training for m in ref.modules()]
            ref.eval()
            try:
                value = float(_total(ref(copies, labels)).float())
            finally:
                for m, t in zip(ref.modules(), was):
                    m.training = t
        return value

    def _record(self, index: int, loss: float, reference: float | None) -> float:
        """Record one training batch's loss; step the weights at the window's end; return ``q_g / p_g``."""
        if self.accumulation_steps is None:
            raise ConfigError("MixtureDRO was not registered with the trainer, so it cannot know the training steps.",
                              fix="pass it in callbacks=[dro] as well as loss=dro.wrap_loss(loss).")
        self._window.append((index, loss, reference))
        self._forwards += 1
        if self._forwards % (self.accumulation_steps * self.update_every) == 0:
            self.update([w[0] for w in self._window], [w[1] for w in self._window],
                        None if self._reference_values is None and self._reference_module is None
                        else [w[2] for w in self._window])
            self._window = []
        return float(self.strategy.weights[index] / self.sampling[index])

    def update(self, datasets: Sequence[int], losses: Sequence[float],
               references: Sequence[float] | None = None) -> None:
        """One weight step from batch losses (``datasets[i]``: the dataset index of batch ``i``) through
        :meth:`drmix.mixture.dro.DROStrategy.step_weights` -- what each window end calls."""
        m = self.strategy.step_weights(np.asarray(losses, dtype=np.float64),
                                       None if references is None else np.asarray(references, dtype=np.float64),
                                       np.asarray(datasets, dtype=np.int64))
        record = self.strategy.trajectory_record(self.strategy.n_steps)
        if record is not None:
            record["update"] = record.pop("step")
            self._pending_records.append(record)
        if not m.ok:
            log.warning("%s: weight update skipped (%s)", self.strategy_name, m.reason)

    # -- trainer callbacks -----------------------------------------------------------------------------------
    def _dir(self, args) -> Path:
        return self.weights_dir if self.weights_dir is not None else Path(args.output_dir)

    def on_train_begin(self, args, state, control, **kwargs):
        self.accumulation_steps = max(int(args.gradient_accumulation_steps), 1)
        self._rank_zero = bool(state.is_world_process_zero)
        out = self._dir(args)
        step = int(state.global_step or 0)
        self._forwards = step * self.accumulation_steps
        self._window = []
        if step > 0:
            path = Path(args.output_dir) / f"checkpoint-{step}" / STATE_FILE
            if not path.is_file():
                raise CheckpointError(f"resuming at step {step} but the checkpoint holds no {STATE_FILE}, so the "
                                      f"{self.strategy_name} weights cannot be restored.", path=path.parent,
                                      fix="resume from a checkpoint written with MixtureDRO in callbacks, or start anew.")
            state_dict = json.loads(path.read_text(encoding="utf-8"))
            self.strategy.load_state_dict(state_dict["strategy"])
            if self._rank_zero and (out / TRAJECTORY_FILE).is_file():
                keep = [ln for ln in (out / TRAJECTORY_FILE).read_text(encoding="utf-8").splitlines()
                        if ln.strip() and json.loads(ln).get("step", 0) <= step]
                from drmix.io.atomic import atomic_write_text

                atomic_write_text(out / TRAJECTORY_FILE, "".join(ln + "\n" for ln in keep))
        elif self._rank_zero and not self.overwrite:
            existing = [str(out / n) for n in (WEIGHTS_FILE, TRAJECTORY_FILE) if (out / n).exists()]
            if existing:
                raise ConfigError(f"the output folder already holds {', '.join(existing)}.", path=out,
                                  fix="choose another output_dir, or pass MixtureDRO(..., overwrite=True) to replace them.")
        elif self._rank_zero and (out / TRAJECTORY_FILE).exists():
            (out / TRAJECTORY_FILE).unlink()
        log.info("%s weights at step %d: %s (datasets drawn with %s)", self.strategy_name, step,
                 _fmt(self.weights), _fmt(dict(zip(self.names, self.sampling.tolist()))))
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self._pending_records:
            if self._rank_zero:
                out = self._dir(args)
                out.mkdir(parents=True, exist_ok=True)
                with open(out / TRAJECTORY_FILE, "a", encoding="utf-8") as f:
                    for r in self._pending_records:
                        f.write(json.dumps({"step": int(state.global_step), **r}) + "\n")
            self._pending_records = []
        return control

    def on_save(self, args, state, control, **kwargs):
        if self._rank_zero:
            from drmix.io.atomic import atomic_write_json

            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                atomic_write_json(folder / STATE_FILE, {"strategy": self.strategy.state_dict(),
                                                        "forwards": self._forwards})
        return control

    def on_train_end(self, args, state, control, **kwargs):
        final = self.final_weights()
        if self._rank_zero:
            from drmix.io.atomic import atomic_write_json

            atomic_write_json(self._dir(args) / WEIGHTS_FILE, final)
        log.info("%s final weights after %d updates: %s", self.strategy_name, self.strategy.n_steps,
                 _fmt(dict(zip(self.names, final["weights"]))))
        return control

    def final_weights(self) -> dict[str, Any]:
        """``weights.json``: drmix's strategy output plus how it was trained here."""
        return {**self.strategy.final_weights(), "trainer": "sentence-transformers",
                "unit": "batch", "sampling": dict(zip(self.names, self.sampling.tolist())),
                "update_every": self.update_every}


def _fmt(weights: Mapping[str, float]) -> str:
    return ", ".join(f"{n}={w:.3f}" if math.isfinite(w) else f"{n}=nan" for n, w in weights.items())


__all__ = ["Mixture", "MixtureBatchSampler", "MixtureDRO", "mixture"]
