"""Static mixtures: weights fixed before training.

* uniform: ``w_i = 1/M``
* size: ``w_i = |D_i| / sum_j |D_j|`` (every example equally likely)
* temperature: ``w_i ∝ |D_i|^(1/tau)`` (tau=1 is size-proportional, tau→∞ is uniform; as in
  multilingual and multi-task sampling, and the Inf-DDS paper's initialisation)
* file: weights read from a ``weights.json`` written by a strategy run (its ``weights`` entry) or a plain
  ``{name: weight}`` JSON mapping; every training collection needs a weight (0 drops it).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from drmix.errors import ConfigError
from drmix.mixture.base import Strategy


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
    return w / w.sum()


def read_weights_file(path: str | Path, names: list[str]) -> np.ndarray:
    """Weights aligned with ``names`` from a strategy's ``weights.json`` or a ``{name: weight}`` mapping.

    One reader serves ``--mixture file`` and ``--transfer``: see :func:`drmix.mixture.transfer.read_weights_file`
    (the ``weights`` entry of a strategy output is used; every training collection must have a weight).
    """
    from drmix.mixture.transfer import align_weights
    from drmix.mixture.transfer import read_weights_file as read_mapping

    return align_weights(read_mapping(path), names, source=path)


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
