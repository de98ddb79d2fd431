"""Stage 1 of tDRO on its own (``drmix mixture optimize``): learn collection weights with a DRO strategy.

Specification: tDRO ("Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
Ma et al., AAAI 2025, arXiv:2408.10613; Fig. 1 and "Settings"): a proxy model trained on
*mixed* batches (every collection, equal share) with hard-negative-only InfoNCE while the frozen reference
model is forwarded on the same inputs; the strategy (:mod:`drmix.mixture.dro`: ``tdro``, ``doremi``,
``groupdro``) turns per-collection losses into weights. The whole recipe (reference, weights, transfer,
evaluation) is :mod:`drmix.recipes.tdro`.

The stage-1 setting is the authors' (``scripts/s1_tdro.sh``): ``train_n_passages 8`` -- **seven hard negatives**
per query (:data:`STAGE1_NEGATIVES`), ``dro_only_hn`` (no in-batch or cross-device negatives), and contrastive
temperature **0.002** on cosine scores (``score_function cos_sim``; :data:`STAGE1_TEMPERATURE`). drmix's default
model normalises its embeddings too (``normalize: true``), so the temperature applies as it is; with
``normalize: false`` (dot products) stage 1 is refused unless it is given a temperature of its own. The fine-tuning stages keep their own
settings; ``stage1: {num_negatives: 1, temperature: 0.05}`` (pipeline) or ``--num-negatives`` /
``--temperature`` (``drmix mixture optimize``) set stage 1 otherwise -- drmix's earlier setting was one negative
at the fine-tuning temperature 0.05, which makes each example's loss a 2-way softmax.

Collections with fewer hard negatives than that (``negatives: mine``, the default): the missing ones are mined
with drmix's own miner (:func:`drmix.augment.mine.top_up_negatives`, the defaults of ``drmix mine``: the bundled
all-MiniLM-L6-v2, ranks 1-30 of the collection's own documents without the query's positives and negatives,
the positive-aware filter at 0.95), as the authors mined the datasets that had none (with bge-base-en-v1.5).
The counts are logged and written to ``negatives.json`` in the output folder. ``negatives: random`` gives each
example without negatives random positives of *other examples of the same collection* instead
(:func:`fill_missing_negatives`, drmix's earlier rule); ``negatives: off`` leaves the data as it is (an example
without any negative then has a loss of exactly 0 under hard-negative-only InfoNCE).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from drmix.config import Config, TrainConfig
from drmix.errors import ConfigError

log = logging.getLogger(__name__)

#: hard negatives per query in stage 1 (the authors' ``train_n_passages 8``)
STAGE1_NEGATIVES = 7
#: contrastive temperature of stage 1 (the authors' ``--temperature 0.002`` on cosine scores)
STAGE1_TEMPERATURE = 0.002
#: what stage 1 does with examples that have fewer than ``num_negatives`` hard negatives
NEGATIVE_FILLS = ("mine", "random", "off")


def mine_missing_negatives(collections: list, num_negatives: int, *, model: Any = None,
                           window: str = "1:30", max_score_ratio: float | None = 0.95) -> dict[str, dict]:
    """Top every example up to ``num_negatives`` hard negatives with drmix's miner (in place); the counts per
    collection (``examples``, ``needed`` = examples that had fewer, ``mined`` = negatives added, ``short`` =
    examples still below after mining). ``model``: the miner, an encoder or its path (default: ``drmix mine``'s,
    the bundled all-MiniLM-L6-v2), loaded only when some example needs negatives."""
    from dataclasses import asdict

    from drmix.augment.mine import top_up_negatives

    report: dict[str, dict] = {}
    for c in collections:
        ds = c.dataset
        negs = ds["negatives"]
        if all(len(n) >= num_negatives for n in negs):
            report[c.name] = {"examples": len(ds), "needed": 0, "mined": 0, "short": 0}
            continue
        if model is None or isinstance(model, (str, Path)):
            from drmix.model.encoder import load_encoder

            model = load_encoder(None if model is None else str(model))
        queries = [c.format_query(q) for q in ds["query"]]
        new, stats = top_up_negatives(queries, ds["positives"], negs, model, num_negatives=num_negatives,
                                      window=window, max_score_ratio=max_score_ratio)
        c.dataset = ds.remove_columns("negatives").add_column("negatives", new, feature=ds.features["negatives"])
        report[c.name] = {"examples": len(ds), "needed": stats.queries, "mined": stats.negatives,
                          "short": stats.short, **{k: v for k, v in asdict(stats).items()
                                                   if k in ("pool", "filtered")}}
        log.info("stage 1: %s: %d of %d examples had fewer than %d hard negatives; mined %d (%d still short)",
                 c.name, stats.queries, len(ds), num_negatives, stats.negatives, stats.short)
    return report


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
    config): the authors' setting (module docstring) -- mixed equal-share batches, hard-negative-only InfoNCE with
    :data:`STAGE1_NEGATIVES` negatives at :data:`STAGE1_TEMPERATURE`, uniform sampling, the DRO strategy;
    ``overrides`` (flat names of training fields) win over all of it.

    :data:`STAGE1_TEMPERATURE` is the authors' for *cosine* scores: with ``normalize`` off (dot products) and no
    stage-1 ``temperature`` given, the configuration is refused (a :class:`~drmix.errors.ConfigError`) rather
    than dividing raw dot products by 0.002."""
    config = TrainConfig.from_parts(base, **{
        "batching": "mixed", "in_batch_negatives": False, "cross_device_negatives": False, "mixture": "uniform",
        "num_negatives": STAGE1_NEGATIVES, "temperature": STAGE1_TEMPERATURE, "strategy": strategy,
        "reference_model": reference, "transfer": None, "weights_file": None, "output_dir": str(output_dir),
        "resume": True, **(overrides or {})})
    if not config.model.normalize and "temperature" not in (overrides or {}):
        raise ConfigError(f"tDRO stage 1's temperature {STAGE1_TEMPERATURE} is the authors' for cosine scores, but "
                          f"normalize is off: it would divide raw dot products by {STAGE1_TEMPERATURE}.",
                          fix="keep normalize on, or give stage 1 a temperature for dot products (drmix pipeline "
                              "tdro: --stage1 temperature=0.05; drmix mixture optimize: --temperature 0.05).")
    return config


def optimize_weights(config: TrainConfig, *, strategy: str | None = None, fill_negatives: bool | str = "mine",
                     miner: Any = None):
    """Stage 1: learn collection weights with ``strategy`` (default ``config.mixture.strategy``); returns a
    TrainResult.

    ``config`` is used as given except that ``strategy`` is set; call :func:`stage1_config` first to get the
    paper's stage-1 settings from a fine-tuning config. ``fill_negatives``: ``mine`` (default; ``True`` is the
    same), ``random`` or ``off`` (``False``) -- what happens to examples with fewer than ``num_negatives`` hard
    negatives (module docstring); ``miner`` is the encoder (or its path) that mines (default: ``drmix mine``'s
    model).
    """
    from drmix.data.collections import collections_for
    from drmix.io.atomic import atomic_write_json
    from drmix.api import train
    from drmix.mixture.registry import build_strategy, strategy_names

    fill = {True: "mine", False: "off"}.get(fill_negatives, fill_negatives) if isinstance(fill_negatives, bool) \
        else fill_negatives
    if fill not in NEGATIVE_FILLS:
        raise ConfigError(f"unknown stage-1 negatives rule {fill_negatives!r}.", fix=f"use one of {', '.join(NEGATIVE_FILLS)}.")
    name = (strategy or config.mixture.strategy).lower()
    dro_strategies = strategy_names(family="dro")
    if name not in dro_strategies:
        raise ConfigError(f"unknown weight-learning strategy '{name}'.", fix=f"use one of {', '.join(dro_strategies)}.")
    strat = build_strategy(config.replace(strategy=name), [])
    if strat.config.measurement != "raw" and not config.mixture.reference_model:
        raise ConfigError(f"strategy '{name}' needs a frozen reference model.",
                          fix="set reference_model (a model trained with uniform weights), or run "
                              "`drmix pipeline tdro` which trains one (stage 0).")
    c = config.contrastive
    if c.batching != "mixed":
        log.warning("stage 1 normally uses mixed batches (batching: mixed); got %s", c.batching)
    config = config.replace(strategy=name)
    collections = collections_for(config)
    if not c.in_batch_negatives and c.num_negatives >= 1:
        if fill == "mine":
            from drmix.retrieval.shards import writes_here

            report = mine_missing_negatives(collections, c.num_negatives, model=miner)
            out = Path(config.run.output_dir)
            if writes_here():  # under torchrun (drmix adapt): rank 0 writes
                out.mkdir(parents=True, exist_ok=True)
                atomic_write_json(out / "negatives.json", {"num_negatives": c.num_negatives, "rule": "mine",
                                                           "collections": report})
        elif fill == "random":
            collections = fill_missing_negatives(collections, c.num_negatives, seed=config.optim.seed)
    return train(config, strategy=strat, collections=collections)
