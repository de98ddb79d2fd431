"""Encoding fast: inference precision (fp16/bf16 autocast, CPU int8) and encoding spread over GPUs.

* ``precision``: ``auto`` (fp16/bf16 on a GPU as :func:`drmix.device.resolve_precision`
  picks, fp32 on CPU), ``fp32``, ``fp16``, ``bf16`` (``torch.autocast``: the weights stay fp32, the
  matmuls run in half precision), or ``int8``: PyTorch dynamic quantisation of every ``nn.Linear``
  (int8 weights, activations quantised per batch; CPU only), applied to a copy so the caller's
  model is untouched and kept per weights fingerprint, so repeated calls reuse it. ``onnx`` and
  ``onnx-int8``: the transformer runs in ONNX Runtime, fp32 or with per-channel int8 weights
  (:mod:`drmix.retrieval.onnx`; CPU only). The retrieval-quality changes are measured in
  docs/benchmarks.md.
* :func:`encode_sharded`: the texts are cut into one contiguous shard per device and each shard is
  encoded by a replica of the model on its device, on its own thread (CUDA kernels and the fast
  tokenizer release the GIL; no process pool, so no model pickling or start-up), then the rows
  are put back in order.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from drmix.device import model_device

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "fp16", "bf16", "int8", "onnx", "onnx-int8")
SHARD_MIN_TEXTS = 20_000  # below this, one GPU finishes before replicas are copied to the others

_quantized: dict[str, Any] = {}  # fingerprint of the weights -> quantised copy (the last one only)


def quantize_int8(model: Any) -> Any:
    """A CPU copy of ``model`` with every ``nn.Linear`` dynamically quantised to int8.

    The copy is kept for the model's current weights (:func:`drmix.fingerprint.tensors_digest`), so encoding queries and
    then documents quantises once; a model whose weights changed (training) gets a fresh copy."""
    from torch.ao.quantization import quantize_dynamic

    from drmix.fingerprint import tensors_digest

    key = f"{type(model).__name__}|{tensors_digest(model)}"
    if key in _quantized:
        return _quantized[key]
    with warnings.catch_warnings():  # quantised tensor creation is deprecated but still the CPU int8 path
        warnings.simplefilter("ignore")
        q = quantize_dynamic(copy.deepcopy(model).to("cpu"), {torch.nn.Linear}, dtype=torch.qint8)
    _quantized.clear()
    _quantized[key] = q
    return q


def inference_setup(model: Any, precision: str | None) -> tuple[Any, Callable[[], contextlib.AbstractContextManager]]:
    """The model to run and an autocast factory for ``precision`` (see the module docstring)."""
    from drmix.errors import ConfigError
    from drmix.device import inference_autocast

    precision = (precision or "auto").lower()
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}.", fix="use one of " + ", ".join(PRECISIONS) + ".")
    device = model_device(model)
    if precision in ("int8", "onnx", "onnx-int8"):
        if device.type != "cpu":
            raise ConfigError(f"{precision} encoding runs on CPU only.", fix="use --precision fp16 or bf16 on a GPU.")
        if precision == "int8":
            return quantize_int8(model), contextlib.nullcontext
        from drmix.retrieval.onnx import onnx_model

        return onnx_model(model, precision), contextlib.nullcontext
    return model, lambda: inference_autocast(precision, device)


def visible_gpus() -> list[str]:
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def encode_sharded(model: Any, texts: Sequence[str], devices: Sequence[str],
                   encode: Callable[[Any, list[str]], np.ndarray]) -> np.ndarray:
    """``encode(replica, shard)`` on one contiguous shard per device in parallel; rows in input order."""
    texts = list(texts)
    devices = list(devices)
    bounds = np.linspace(0, len(texts), len(devices) + 1).astype(int)
    replicas, home_used = [], False
    for d in devices:  # the model itself serves its own device once; every other shard gets a copy
        if not home_used and torch.device(d) == model_device(model):
            replicas.append(model)
            home_used = True
        else:
            replicas.append(copy.deepcopy(model).to(d))
    log.info("encoding %d texts on %d devices", len(texts), len(devices))
    with ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="drmix-encode") as pool:
        parts = list(pool.map(lambda i: encode(replicas[i], texts[bounds[i]:bounds[i + 1]]), range(len(devices))))
    return np.concatenate(parts, axis=0)
