"""Checks a training configuration must pass before anything is computed or written.

(Device checks: :func:`drmix.device.check_device`.) Each raises a :class:`~drmix.errors.ConfigError` naming the option and the fix, instead of a traceback
deep in the loop (and a ``config.yaml`` left behind by a run that never trained).
"""
from __future__ import annotations

import logging
import math
from typing import Any

from drmix.errors import ConfigError

log = logging.getLogger(__name__)


def check_model_fit(config: Any, model: Any) -> None:
    """Refuse Matryoshka dimensions larger than the model's embedding."""
    dims = list(getattr(config, "matryoshka_dims", []) or [])
    if not dims:
        return
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    size = get()
    too_big = [d for d in dims if size is not None and d > size]
    if too_big:
        raise ConfigError(f"--matryoshka-dims {too_big} exceed the model's embedding size {size}.",
                          fix=f"use dimensions between 1 and {size}.")


def check_batch_fits(names: list[str], sizes: list[int], batch_size: int) -> None:
    """Refuse a batch larger than all training examples together: every batch would hold each example many
    times over (no new in-batch negatives) and memory would grow with the batch before the first step."""
    total = sum(sizes)
    if batch_size > total:
        shown = ", ".join(f"{n} {s}" for n, s in list(zip(names, sizes))[:5]) + (", ..." if len(names) > 5 else "")
        raise ConfigError(f"--batch-size {batch_size} is larger than the {total} training examples of all "
                          f"collections together ({shown}).",
                          fix=f"use --batch-size {total} or less (a batch holds distinct examples).")


def warn_small_collections(names: list[str], sizes: list[int], batch_size: int, batching: str) -> list[str]:
    """Warn when a homogeneous batch must repeat examples of a collection smaller than the batch."""
    if batching != "homogeneous":
        return []
    small = [f"{n} ({s})" for n, s in zip(names, sizes) if s < batch_size]
    if small:
        log.warning("collections smaller than the batch size %d repeat their examples within a batch "
                    "(repeated positives are in-batch false negatives): %s. Use a smaller --batch-size or "
                    "--batching mixed.", batch_size, ", ".join(small))
    return small


def check_strategy(config: Any, strategy: Any, names: list[str]) -> None:
    """Refuse a run that lacks what the strategy's registered spec says it needs, before training starts.

    The spec's flags (:class:`~drmix.mixture.registry.StrategySpec`) are the one record:

    * ``requires_mixed_batches`` -- tDRO, DoReMi and GroupDRO compare the collections *within* a batch; with
      ``--batching homogeneous`` every batch holds one collection, so their weights could never learn
      anything (they would stay uniform, or drift with the sampling order);
    * ``needs_reference`` (or its ``reference_needed(options)``) -- a frozen reference model's losses;
    * ``needs_dev`` -- dev sets (``--dev``);

    and a ``--mixture`` other than uniform or a ``--weights-file`` given to a strategy other than ``static`` (only
    static training reads them: the others would ignore them without a word).

    ``strategy`` is the built strategy (its ``name`` finds the spec; an unregistered one is not checked).
    """
    from drmix.mixture.registry import STRATEGIES, parse_options

    name = str(getattr(strategy, "name", None) or config.mixture.strategy).lower()
    spec = STRATEGIES.all().get(name)
    if spec is None:
        return
    if name != "static" and (config.mixture.scheme != "uniform" or config.mixture.weights_file):
        given = (f"--weights-file {config.mixture.weights_file}" if config.mixture.scheme == "uniform"
                 else f"--mixture {config.mixture.scheme}")
        raise ConfigError(f"{given} sets the weights of static training; --strategy {name} samples the collections "
                          "by its own rule and would not read it.",
                          fix=f"drop {given.split()[0]}, or train with --strategy static (the default).")
    if spec.requires_mixed_batches and config.contrastive.batching == "homogeneous" and len(names) >= 2:
        raise ConfigError(f"--strategy {name} compares the collections within each batch, but --batching homogeneous "
                          "puts one collection in every batch: the learned weights could never move.",
                          fix="add --batching mixed (as tDRO's stage 1 does; `drmix mixture optimize` sets it), "
                              "or train with --strategy static.")
    options = getattr(strategy, "config", None)
    if options is None or (spec.options is not None and not isinstance(options, spec.options)):
        options = parse_options(spec, getattr(config, spec.field, None))
    if spec.needs_reference_with(options) and not config.mixture.reference_model:
        raise ConfigError(f"--strategy {name} needs a frozen reference model.",
                          fix="set reference_model (a model trained with uniform weights), or run "
                              "`drmix pipeline tdro` which trains one (stage 0).")
    if spec.needs_dev and not config.mixture.dev:
        raise ConfigError(f"strategy '{name}' needs at least one dev set.",
                          fix="pass --dev DIR (a BEIR directory with a dev split), or set `dev:` in the config.")


#: more optimiser steps than any training run takes (over 11 days at 1,000 steps a second): a run this long is a
#: mistyped --epochs or --max-steps, whose warm-up would also keep the learning rate negligible for days
MAX_STEPS = 10**9
#: a warm-up longer than this keeps the learning rate under 1% of its peak for more than 10,000 steps
LONG_WARMUP = 10**6


def check_schedule(config: Any, examples: int) -> list[str]:
    """Refuse a run of more than :data:`MAX_STEPS` optimiser steps (or a non-finite ``--epochs`` /
    ``--learning-rate``) before anything loads, and warn when the warm-up keeps the learning rate negligible: longer
    than the run (the peak is never reached) or than :data:`LONG_WARMUP` steps. ``examples``: the rows of all
    collections, which ``--epochs`` counts passes over. Returns the warnings (the main process logs them)."""
    from drmix.train.optim import warmup_steps

    o, c = config.optim, config.contrastive
    if not math.isfinite(o.learning_rate):
        raise ConfigError(f"--learning-rate {o.learning_rate} is not a finite number.", fix="use e.g. 2e-5.")
    per_step = c.batch_size * c.gradient_accumulation_steps
    if o.epochs is not None:
        steps = o.epochs * examples / per_step if math.isfinite(o.epochs) else math.inf
        given = f"--epochs {o.epochs:g} over {examples:,} examples ({per_step} a step)"
    else:
        steps, given = o.max_steps, f"--max-steps {o.max_steps:,}"
    if steps > MAX_STEPS:
        shown = f"{steps:.3g}" if math.isfinite(steps) else "endless"
        raise ConfigError(f"{given} makes {shown} optimiser steps, more than any training run takes ({MAX_STEPS:,}); "
                          f"the warm-up alone would keep the learning rate negligible for days.",
                          fix="pass a few --epochs (1 to 10 is usual) or --max-steps N.")
    steps = max(1, math.ceil(steps))
    warmup = warmup_steps(config.replace(max_steps=steps, epochs=None))
    warned: list[str] = []
    if warmup > steps:
        warned.append(f"the warm-up ({warmup:,} steps) is longer than the run ({steps:,} steps): the learning rate "
                      f"never reaches --learning-rate {o.learning_rate:g}, it ends at "
                      f"{o.learning_rate * steps / warmup:.2g}. Use a --warmup-steps below the run's steps.")
    elif warmup > LONG_WARMUP:
        warned.append(f"the warm-up lasts {warmup:,} steps: the learning rate stays under 1% of --learning-rate "
                      f"{o.learning_rate:g} for the first {warmup // 100:,} steps. Fewer --epochs / --max-steps, or "
                      "--warmup-steps N, shorten it.")
    return warned
