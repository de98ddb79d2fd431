"""Stage 1 of tDRO on its own (``drmix mixture optimize``): learn collection weights with a DRO strategy.

Specification: tDRO ("Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
Ma et al., AAAI 2025, arXiv:2408.10613; Fig. 1 and "Settings"): a proxy model trained on
*mixed* batches (every collection, equal share) with hard-negative-only InfoNCE while the frozen reference
model is forwarded on the same inputs; the strategy (:mod:`drmix.mixture.dro`: ``tdro``, ``doremi``,
``groupdro``) turns per-collection losses into weights. The whole recipe (reference, weights, transfer,
evaluation) is :mod:`drmix.recipes.tdro`.

Collections without hard negatives: with hard-negative-only InfoNCE their loss is identically 0 (the
positive is the only candidate), so no measurement is possible. :func:`fill_missing_negatives` gives each
such example ``num_negatives`` random positives of *other examples of the same collection* (seeded) -- the
negatives in-batch sampling would give under task-homogeneous batching.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from drmix.config import Config, TrainConfig
from drmix.errors import ConfigError

log = logging.getLogger(__name__)

def fill_missing_negatives(collections: list, num_negatives: int, *, seed: int = 0) -> list:
    """Give examples without hard negatives ``num_negatives`` positives of other examples of their collection.

    Returns the collections (datasets replaced where something was filled); a one-example collection is
    left as it is.
    """
    out = []
    for ci, c in enumerate(collections):
        negs = c.dataset["negatives"]
        missing = [i for i, n in enumerate(negs) if not n]
        n = len(c.dataset)
        if not missing or n < 2 or num_negatives < 1:
            out.append(c)
            continue
        firsts = [p[0] for p in c.dataset["positives"]]
        rng = np.random.default_rng([seed, ci, 15485863])
        k = min(num_negatives, n - 1)
        new_negs = list(negs)
        for i in missing:
            picks = rng.choice(n - 1, size=k, replace=False)
            new_negs[i] = [firsts[j + (j >= i)] for j in picks]      # skip the example itself
        log.info("stage 1: %s: %d of %d examples had no hard negatives; gave them %d same-collection negatives",
                 c.name, len(missing), n, k)
        c.dataset = c.dataset.remove_columns("negatives").add_column(
            "negatives", new_negs, feature=c.dataset.features["negatives"])
        out.append(c)
    return out


def stage1_config(base: Config, *, strategy: str, reference: str | None,
                  output_dir: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The TrainConfig of stage 1, composed from the training parts of ``base`` (a TrainConfig or a recipe's
    config): mixed equal-share batches, hard-negative-only InfoNCE, the DRO strategy; ``overrides`` (flat
    names) last."""
    return TrainConfig.from_parts(base, **{
        "batching": "mixed", "in_batch_negatives": False, "cross_device_negatives": False, "mixture": "uniform",
        "num_negatives": max(1, base.contrastive.num_negatives), "strategy": strategy, "reference_model": reference,
        "transfer": None, "weights_file": None, "output_dir": str(output_dir), "resume": True, **(overrides or {})})


def optimize_weights(config: TrainConfig, *, strategy: str | None = None, fill_negatives: bool = True):
    """Stage 1: learn collection weights with ``strategy`` (default ``config.mixture.strategy``); returns a TrainResult.

    ``config`` is used as given except that ``strategy`` is set; call :func:`stage1_config` first to get the
    paper's stage-1 settings from a fine-tuning config.
    """
    from drmix.data.collections import load_collections
    from drmix.mixture.dro import dro_strategy_from_options
    from drmix.mixture.registry import strategy_names
    from drmix.api import train

    name = (strategy or config.mixture.strategy).lower()
    dro_strategies = strategy_names(family="dro")
    if name not in dro_strategies:
        raise ConfigError(f"unknown weight-learning strategy '{name}'.", fix=f"use one of {', '.join(dro_strategies)}.")
    strat = dro_strategy_from_options(name, config.dro)
    if strat.config.measurement != "raw" and not config.mixture.reference_model:
        raise ConfigError(f"strategy '{name}' needs a frozen reference model.",
                          fix="set reference_model (a model trained with uniform weights), or run "
                              "`drmix pipeline tdro` which trains one (stage 0).")
    if config.contrastive.batching != "mixed":
        log.warning("stage 1 normally uses mixed batches (batching: mixed); got %s", config.contrastive.batching)
    config = config.replace(strategy=name)
    collections = load_collections(config.data.collections, max_size=config.data.max_collection_size, seed=config.optim.seed)
    if fill_negatives and not config.contrastive.in_batch_negatives:
        collections = fill_missing_negatives(collections, max(1, config.contrastive.num_negatives), seed=config.optim.seed)
    return train(config, strategy=strat, collections=collections)
