"""Static mixtures: weights fixed before training.

* uniform: ``w_i = 1/M``
* size: ``w_i = |D_i| / sum_j |D_j|`` (every example equally likely)
* temperature: ``w_i ∝ |D_i|^(1/tau)`` (tau=1 is size-proportional, tau→∞ is uniform; as in
  multilingual and multi-task sampling, and the Inf-DDS paper's initialisation)
* file: weights read from a ``weights.json`` written by a strategy run (its ``weights`` entry) or a plain
  ``{name: weight}`` JSON or YAML mapping -- or, without a weights file, the collections' own ``weight:``
  keys; every training collection needs a weight (0 drops it).

With ``--transfer`` (and ``--weights-file``) the static strategy applies learned weights as
:mod:`drmix.mixture.transfer` describes (top-K selection, sample reweighting or loss reweighting).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from drmix.data.sampling import sum_to_one
from drmix.errors import ConfigError
from drmix.mixture.base import Strategy
from drmix.mixture.registry import StrategySpec, register_strategy

log = logging.getLogger(__name__)


def initial_weights(sizes: list[int], scheme: str = "uniform", *, temperature: float = 2.0) -> np.ndarray:
    s = np.asarray(sizes, dtype=np.float64)
    if scheme == "uniform":
        w = np.ones_like(s)
    elif scheme == "size":
        w = s.copy()
    elif scheme == "temperature":
        if temperature <= 0:
            raise ConfigError(f"mixture temperature must be > 0, got {temperature}.", fix="use e.g. 2.0.")
        w = s ** (1.0 / temperature)
    else:
        raise ConfigError(f"unknown mixture '{scheme}'.", fix="use uniform, size, temperature or file.")
    return sum_to_one(w)


def file_mixture_weights(weights_file: str | Path | None, names: list[str],
                         collection_weights: list[float | None] | None = None) -> np.ndarray:
    """The weights of ``--mixture file``: from ``weights_file`` when given, else from the collections' own
    ``weight:`` keys (YAML collection lists, docs/data.md), every collection needing one."""
    if weights_file:
        if collection_weights and any(w is not None for w in collection_weights):
            log.warning("--weights-file %s overrides the collections' weight: keys", weights_file)
        from drmix.mixture.transfer import align_weights, read_weights_file

        # one reader serves --mixture file and --transfer: the ``weights`` entry of a strategy output is used
        return align_weights(read_weights_file(weights_file), names, source=weights_file)
    given = list(collection_weights or [None] * len(names))
    missing = [n for n, w in zip(names, given) if w is None]
    if missing:
        raise ConfigError(f"--mixture file needs a weight for every collection; {missing} have none.",
                          fix="pass --weights-file FILE (JSON or YAML {name: weight}), or give each collection "
                              "a weight: key in the YAML collection list.")
    w = np.array(given, dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ConfigError(f"collection weights {dict(zip(names, given))} are not non-negative numbers with a "
                          "positive sum.", fix="give each collection a weight: >= 0, at least one > 0.")
    return sum_to_one(w)


class StaticStrategy(Strategy):
    """Fixed sampling weights; the loss is the plain mean."""

    name = "static"

    def __init__(self, weights: np.ndarray | None = None, *, scheme: str = "uniform", temperature: float = 2.0) -> None:
        self._given = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.scheme = scheme
        self.temperature = temperature

    def setup(self, collection_names: list[str], collection_sizes: list[int]) -> None:
        super().setup(collection_names, collection_sizes)
        if self._given is not None:
            if len(self._given) != len(collection_names):
                raise ConfigError(f"{len(self._given)} weights for {len(collection_names)} collections.",
                                  fix="give one weight per collection.")
            self.weights = self._given / self._given.sum()
        else:
            self.weights = initial_weights(collection_sizes, self.scheme, temperature=self.temperature)

    def sampling_weights(self) -> np.ndarray:
        return self.weights

    def final_weights(self) -> dict:
        return {"strategy": self.name, "collections": self.collection_names, "weights": self.weights.tolist()}


def build_static_strategy(config, options: None, names: list[str],
                          weights: list[float | None] | None = None) -> Strategy:
    """``--strategy static``: the ``--mixture`` weights (``weights``: the collections' ``weight:`` keys, used by
    ``--mixture file`` without a file), or learned weights applied by ``--transfer``."""
    if config.mixture.transfer:
        if not config.mixture.weights_file:
            raise ConfigError("--transfer needs --weights-file (a weights.json from `drmix mixture optimize`).",
                              fix="add --weights-file RUN/weights.json.")
        from drmix.mixture.transfer import build_transfer_strategy

        return build_transfer_strategy(config.mixture.weights_file, config.mixture.transfer, names)
    if config.mixture.scheme == "file":
        return StaticStrategy(file_mixture_weights(config.mixture.weights_file, names, weights))
    if any(w is not None for w in weights or ()):
        log.warning("the collections' weight: keys are used only with --mixture file; mixing %s instead",
                    config.mixture.scheme)
    return StaticStrategy(scheme=config.mixture.scheme, temperature=config.mixture.mixture_temperature)


register_strategy(StrategySpec(
    name="static", build=build_static_strategy, card_text="fixed before training",
    help="fixed weights (--mixture uniform|size|temperature|file), or learned ones applied by --transfer."))
