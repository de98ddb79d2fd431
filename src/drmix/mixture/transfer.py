"""Transfer of learned collection weights into fine-tuning (stage 2 of tDRO).

Specification: tDRO ("Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
Ma et al., AAAI 2025, arXiv:2408.10613, section "Settings" and Table 5), which transfers the
weights learned by a proxy model in three ways; all three keep the task-homogeneous batches of fine-tuning:

* ``top:K`` -- *top-rated dataset selection*: keep the ``K`` fraction of collections with the highest
  weights and sample uniformly among them (the paper transfers top-70%). The number kept is
  ``max(1, floor(k * K))`` over the ``k`` training collections, as in the authors' code
  (``n_groups * percent // 100``); ties go to the collection listed first. ``K`` is a fraction
  (``top:0.7``) or a percentage (``top:70`` / ``top:70%``).
* ``reweight`` -- *sample-ratio reweighting*: sample collections with the learned weights.
* ``loss`` -- *loss reweighting*: sampling stays uniform; each example's loss is multiplied by
  ``s_g = k * alpha_g``. The scales average to 1 over the collections, so under uniform sampling the
  expected scale of the loss (and so the effective learning rate) equals that of uniform training; only
  the relative emphasis between collections changes. (The paper does not say how it normalises; this
  keeps learning-rate settings comparable across the three transfers.)

The weights come from a ``weights.json`` written by a strategy run (its ``weights`` list, aligned with
``collections``; for DoReMi that is the average over steps) or from a plain ``{"name": weight}`` mapping.
Training collections that the file does not name are an error; names in the file that are not being
trained on are dropped with a warning and the rest renormalised.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.errors import ConfigError
from drmix.mixture.base import StepContext, Strategy
from drmix.mixture.dro import top_k_selection

log = logging.getLogger(__name__)

TRANSFERS = ("top:K", "reweight", "loss")


def read_weights_file(path: str | Path, *, key: str | None = None) -> dict[str, float]:
    """``{collection: weight}`` from a ``weights.json`` (``key``: ``final``/``mean``/``ema``; default ``weights``)
    or a ``{name: weight}`` file; ``.yaml``/``.yml`` files are read as YAML (``safe_load``), others as JSON."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError("weights file not found." if not path.exists() else "weights file is not a file.",
                          path=path, fix="pass the weights.json written by `drmix mixture optimize`, or a "
                                         "{name: weight} JSON/YAML file.")
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text) if is_yaml else json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("weights file is not valid UTF-8.", path=path, fix="re-encode it as UTF-8.") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"weights file is not valid JSON ({e}).", path=path, line=e.lineno,
                          fix="fix the JSON, or name a YAML file .yaml.") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"weights file is not valid YAML ({getattr(e, 'problem', e)}).", path=path,
                          line=(mark.line + 1) if mark else None, fix="fix the YAML syntax.") from None
    if not isinstance(data, dict):
        raise ConfigError("weights file must hold a mapping.", path=path,
                          fix='write {"collections": [...], "weights": [...]} or {"name": weight, ...}.')
    if key is not None:
        if not isinstance(data.get(key), dict):
            raise ConfigError(f"weights file has no {key!r} weights.", path=path,
                              fix="use one of: final, mean, ema (or omit the key).")
        raw = data[key]
    elif "weights" in data:
        w = data["weights"]
        if isinstance(w, dict):
            raw = w
        elif isinstance(w, list) and isinstance(data.get("collections"), list) and len(w) == len(data["collections"]):
            raw = dict(zip(data["collections"], w))
        else:
            raise ConfigError("'weights' must be a mapping or a list as long as 'collections'.", path=path,
                              fix='write {"collections": [...], "weights": [...]}.')
    else:
        raw = data
    out: dict[str, float] = {}
    for name, value in raw.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"weight of collection {name!r} is {value!r}, not a finite number >= 0.", path=path,
                              fix="weights must be non-negative numbers.")
        out[str(name)] = float(value)
    if not any(v > 0 for v in out.values()):
        raise ConfigError("weights file holds no positive weight.", path=path, fix="check the strategy run's output.")
    return out


def align_weights(weights: dict[str, float], collection_names: list[str], *, source: str | Path = "") -> np.ndarray:
    """Weights in the order of ``collection_names``, renormalised to sum to 1."""
    missing = [n for n in collection_names if n not in weights]
    if missing:
        raise ConfigError(f"weights file has no weight for training collection(s) {missing}; it names "
                          f"{sorted(weights)}.", path=source or None,
                          fix="train on the collections the weights were learned on (same names).")
    extra = sorted(set(weights) - set(collection_names))
    if extra:
        log.warning("weights for %s are not used: those collections are not being trained on.", extra)
    w = np.array([weights[n] for n in collection_names], dtype=np.float64)
    if not np.any(w > 0):
        raise ConfigError("the training collections all have weight 0.", path=source or None,
                          fix="train on collections with positive learned weight.")
    from drmix.data.sampling import sum_to_one

    return sum_to_one(w)


def parse_top_fraction(spec: str) -> float:
    """``"top:0.7"``, ``"top:70"``, ``"top:70%"`` -> 0.7."""
    text = spec.split(":", 1)[1].strip() if ":" in spec else ""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise ConfigError(f"cannot read the fraction in transfer {spec!r}.",
                          fix="write top:0.7 (a fraction) or top:70 (a percentage).") from None
    if not text.endswith("%") and value > 1 and not value.is_integer():
        raise ConfigError(f"transfer {spec!r}: {value:g} is neither a fraction in (0, 1] nor a whole percentage.",
                          fix="write top:0.7 (a fraction), top:70 (a percentage) or top:1.5% (explicitly).")
    frac = value / 100 if (text.endswith("%") or value > 1) else value
    if not 0 < frac <= 1:
        raise ConfigError(f"transfer {spec!r} keeps {frac:.0%} of the collections.",
                          fix="use a fraction in (0, 1], e.g. top:0.7.")
    return frac


class FixedWeightsStrategy(Strategy):
    """Static sampling weights plus per-collection loss scales (the three transfers are instances)."""

    def __init__(self, sampling: np.ndarray, loss_scales: np.ndarray | None = None, *, name: str = "transfer",
                 info: dict | None = None) -> None:
        self.name = name
        self._sampling = np.asarray(sampling, dtype=np.float64)
        self._scales = None if loss_scales is None else np.asarray(loss_scales, dtype=np.float64)
        self.info = dict(info or {})

    def setup(self, collection_names: list[str], collection_sizes: list[int]) -> None:
        super().setup(collection_names, collection_sizes)
        if len(collection_names) != len(self._sampling):
            raise ConfigError(f"transfer weights cover {len(self._sampling)} collections, training has "
                              f"{len(collection_names)}.", fix="build the transfer for the training collections.")

    def sampling_weights(self) -> np.ndarray:
        return self._sampling.copy()

    def loss_scales(self) -> np.ndarray:
        return np.ones_like(self._sampling) if self._scales is None else self._scales.copy()

    def loss(self, losses: torch.Tensor, batch: Batch, ctx: StepContext) -> torch.Tensor:
        if self._scales is None:
            return losses.mean()
        s = torch.as_tensor(self._scales[np.asarray(batch.collection_ids, dtype=np.int64)], dtype=losses.dtype,
                            device=losses.device)
        return (losses * s).mean()

    def final_weights(self) -> dict:
        names = self.collection_names
        return {"collections": list(names), "weights": self._sampling.tolist(),
                "loss_scales": self.loss_scales().tolist(), **self.info}


def build_transfer_strategy(weights_file: str, transfer: str, collection_names: list[str]) -> Strategy:
    """The fine-tuning strategy for ``drmix train --weights FILE --transfer top:0.7|reweight|loss``."""
    spec = transfer.strip().lower()
    learned = align_weights(read_weights_file(weights_file), collection_names, source=weights_file)
    k = len(collection_names)
    info = {"transfer": spec, "weights_file": str(weights_file),
            "learned": {n: float(w) for n, w in zip(collection_names, learned)}}
    if spec.startswith("top"):
        frac = parse_top_fraction(spec)
        kept = top_k_selection(collection_names, learned, round(frac * 100, 6))
        sampling = np.array([1.0 / len(kept) if n in kept else 0.0 for n in collection_names])
        log.info("transfer %s: keeping %d of %d collections: %s", spec, len(kept), k, kept)
        return FixedWeightsStrategy(sampling, name=f"top:{frac:g}", info={**info, "kept": kept})
    if spec == "reweight":
        return FixedWeightsStrategy(learned, name="reweight", info=info)
    if spec == "loss":
        return FixedWeightsStrategy(np.full(k, 1.0 / k), learned * k, name="loss", info=info)
    raise ConfigError(f"unknown transfer {transfer!r}.", fix="use top:0.7 (any fraction), reweight or loss.")
