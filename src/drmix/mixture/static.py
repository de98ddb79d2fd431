"""Static mixtures: weights fixed before training.

* uniform: ``w_i = 1/M``
* size: ``w_i = |D_i| / sum_j |D_j|`` (every example equally likely)
* temperature: ``w_i ∝ |D_i|^(1/tau)`` (tau=1 is size-proportional, tau→∞ is uniform; as in
  multilingual and multi-task sampling, and the Inf-DDS paper's initialisation)
* file: weights read from a ``weights.json`` written by a strategy run (its ``final`` entry) or a plain
  ``{name: weight}`` JSON/YAML mapping; collections absent from the file get weight 0.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from drmix.config import read_yaml
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
    """Weights aligned with ``names`` from a weights.json (strategy output) or a {name: weight} mapping."""
    path = Path(path)
    raw = read_yaml(path) if path.suffix in {".yaml", ".yml"} else _read_json(path)
    mapping: dict[str, float]
    if isinstance(raw, dict) and "collections" in raw:
        entry = raw.get("final", raw.get("weights"))
        if isinstance(entry, dict):
            mapping = entry
        else:
            mapping = dict(zip(raw["collections"], entry or []))
    elif isinstance(raw, dict):
        mapping = raw
    else:
        raise ConfigError("weights file must map collection names to weights.", path=path,
                          fix='write {"name": weight, ...} or pass a weights.json from `drmix mixture optimize`.')
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise ConfigError(f"weights name unknown collections {unknown}.", path=path,
                          fix=f"use names from the training data: {names}.")
    try:
        w = np.array([float(mapping.get(n, 0.0)) for n in names])
    except (TypeError, ValueError):
        raise ConfigError("weights must be numbers.", path=path, fix="write numeric weights.") from None
    if np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ConfigError("weights must be finite, non-negative and not all zero.", path=path, fix="fix the values.")
    return w / w.sum()


def _read_json(path: Path):
    if not path.exists():
        raise ConfigError("weights file not found.", path=path, fix="check the path.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON ({e.msg}).", path=path, line=e.lineno, fix="fix the JSON syntax.") from None


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
        return {"strategy": self.name, "collections": self.collection_names,
                "final": dict(zip(self.collection_names, self.weights.tolist()))}
