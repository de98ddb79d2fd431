"""CPU encoding with ONNX Runtime: ``--precision onnx`` (fp32) and ``onnx-int8`` (dynamic int8).

The SentenceTransformer's transformer (the Hugging Face model inside its first module) is exported to
ONNX once with ``torch.onnx.export`` (inputs ``input_ids``, ``attention_mask`` and, when the tokenizer
makes them, ``token_type_ids``; output ``last_hidden_state``; batch and sequence axes dynamic), with
eager attention so that ONNX Runtime's transformer optimiser (``onnxruntime.transformers.optimizer``,
``model_type="bert"``) can fuse each layer's attention, the embedding layer norm and the GELUs into
single kernels (a model it cannot fuse keeps the plain graph). For ``onnx-int8`` the optimised graph
is quantised with ONNX Runtime's ``quantize_dynamic``: int8 weights **per output channel** and a
reduced 7-bit range (what ONNX Runtime recommends on x86 CPUs without VNNI, where the 8-bit u8s8
product can saturate), activations quantised per batch at run time; fused attention becomes
``QAttention``, so the attention projections run in int8 too. Only the transformer runs in
ONNX Runtime; pooling, normalisation and every later module stay the model's own torch modules, so
any pooling mode and Matryoshka truncation behave exactly as in fp32.

Exports are cached under ``$DRMIX_CACHE`` (default ``~/.cache/drmix``) in ``onnx/<fingerprint>/``,
the fingerprint being a BLAKE2b hash of the weights and the config, so a model being trained is never
served a stale export, and an ONNX Runtime session is kept per fingerprint in the process.

sentence-transformers' own ONNX backend needs ``optimum-onnx``, which pins transformers below 4.58;
this module uses ``onnx`` and ``onnxruntime`` directly (the ``onnx`` extra: ``pip install drmix[onnx]``).
"""
from __future__ import annotations

import collections
import copy
import logging
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from drmix.errors import ConfigError
from drmix.fingerprint import tensors_digest
from drmix.io.checks import cache_root

log = logging.getLogger(__name__)

ONNX_PRECISIONS = ("onnx", "onnx-int8")
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_FORMAT = "drmix-onnx-2"  # bump when the export or quantisation settings change
_sessions: dict[str, Any] = {}
_lock = threading.Lock()


def _require() -> tuple[Any, Any]:
    try:
        import onnx  # noqa: F401
        import onnxruntime
        from onnxruntime.quantization import quantize_dynamic
    except ImportError:
        raise ConfigError("--precision onnx/onnx-int8 needs the packages onnx and onnxruntime.",
                          fix="pip install 'drmix[onnx]' (or pip install onnx onnxruntime).") from None
    return onnxruntime, quantize_dynamic


def transformer_module(model: Any) -> tuple[str, Any]:
    """The key and module of the SentenceTransformer's first module, which must hold a Hugging Face model."""
    modules = getattr(model, "_modules", None) or {}
    if not modules:
        raise ConfigError("ONNX encoding needs a SentenceTransformer.", fix="use --precision fp32 or int8.")
    key = next(iter(modules))
    first = modules[key]
    inner = getattr(first, "model", None)
    if not isinstance(inner, torch.nn.Module) or not hasattr(inner, "config"):
        raise ConfigError(f"ONNX encoding supports models whose first module is a Hugging Face transformer, "
                          f"not {type(first).__name__}.", fix="use --precision fp32 or int8 for this model.")
    return key, first


class _Exportable(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, tensors)), return_dict=True).last_hidden_state


def _input_names(first: Any) -> tuple[str, ...]:
    tokenizer = getattr(first, "tokenizer", None)
    names = tuple(getattr(tokenizer, "model_input_names", None) or ("input_ids", "attention_mask"))
    return tuple(n for n in _INPUTS if n in names)


def export(first: Any, folder: Path, *, quantize: bool) -> Path:
    """Write ``model.onnx`` (and ``model-int8.onnx``) for the transformer of ``first`` into ``folder``."""
    _, quantize_dynamic = _require()
    from onnxruntime.quantization import QuantType

    names = _input_names(first)
    hf = copy.deepcopy(first.model).to("cpu").float().eval()
    if hasattr(hf, "set_attn_implementation"):  # eager attention: a graph the optimiser can fuse
        try:
            hf.set_attn_implementation("eager")
        except Exception:  # noqa: BLE001 - a model without a switchable attention keeps its own
            pass
    example = {"input_ids": torch.tensor([[1, 2, 3], [1, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
               "token_type_ids": torch.zeros(2, 3, dtype=torch.long)}
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "model.onnx"
    if not fp32.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            target = Path(tmp) / "model.onnx"
            torch.onnx.export(_Exportable(hf, names), tuple(example[n] for n in names), str(target),
                              input_names=list(names), output_names=["last_hidden_state"],
                              dynamic_axes={n: {0: "batch", 1: "sequence"} for n in (*names, "last_hidden_state")},
                              opset_version=17, dynamo=False)
            fused = _optimise(target, hf.config)
            os.replace(fused or target, fp32)
    if not quantize:
        return fp32
    int8 = folder / "model-int8.onnx"
    if not int8.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            target = Path(tmp) / "model-int8.onnx"
            root = logging.getLogger()  # the quantiser logs a pre-processing hint on the root logger
            was = root.disabled
            root.disabled = True
            try:
                quantize_dynamic(str(fp32), str(target), weight_type=QuantType.QInt8, per_channel=True,
                                 reduce_range=True, extra_options={"DefaultTensorType": 1})  # 1 = FLOAT
            finally:
                root.disabled = was
            os.replace(target, int8)
    return int8


def _optimise(path: Path, config: Any) -> Path | None:
    """ONNX Runtime's BERT fusions (attention, embedding layer norm, GELU) on ``path``; None if none applied."""
    heads, hidden = getattr(config, "num_attention_heads", None), getattr(config, "hidden_size", None)
    if not heads or not hidden:
        return None
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        logger = logging.getLogger("onnxruntime.transformers")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            model = optimize_model(str(path), model_type="bert", num_heads=int(heads), hidden_size=int(hidden))
        finally:
            logger.setLevel(level)
        stats = model.get_fused_operator_statistics()
        if not any(stats.get(op, 0) for op in ("Attention", "MultiHeadAttention", "SkipLayerNormalization")):
            return None
        out = path.with_name("model-optimised.onnx")
        model.save_model_to_file(str(out))
        log.info("ONNX Runtime fusions: %s", {k: v for k, v in stats.items() if v})
        return out
    except Exception as e:  # noqa: BLE001 - an architecture the optimiser does not know: plain graph
        log.info("ONNX Runtime optimiser not applied (%s: %s)", type(e).__name__, e)
        return None


class OrtTransformer(torch.nn.Module):
    """Stands in for the Hugging Face model: runs the exported graph, returns ``last_hidden_state``."""

    def __init__(self, session: Any, config: Any, names: tuple[str, ...]) -> None:
        super().__init__()
        self.session = session
        self.config = config
        self.names = names

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, **_: Any) -> Any:
        from transformers.modeling_outputs import BaseModelOutput

        given = {"input_ids": input_ids, "attention_mask": attention_mask if attention_mask is not None
                 else torch.ones_like(input_ids), "token_type_ids": token_type_ids if token_type_ids is not None
                 else torch.zeros_like(input_ids)}
        feeds = {n: given[n].to("cpu", torch.int64).numpy() for n in self.names}
        (hidden,) = self.session.run(["last_hidden_state"], feeds)
        return BaseModelOutput(last_hidden_state=torch.from_numpy(hidden))


def _session(path: Path) -> Any:
    ort, _ = _require()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = torch.get_num_threads()  # the same thread budget as torch
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_model(model: Any, precision: str) -> Any:
    """A shallow copy of ``model`` whose transformer runs in ONNX Runtime (``precision``: onnx | onnx-int8)."""
    if precision not in ONNX_PRECISIONS:
        raise ValueError(precision)
    _require()
    key, first = transformer_module(model)
    quantize = precision == "onnx-int8"
    names = _input_names(first)
    fp = tensors_digest(first.model, extra=f"{_FORMAT}|{first.model.config.to_json_string()}|{names}")
    memo = f"{fp}|{precision}"
    with _lock:
        session = _sessions.get(memo)
        if session is None:
            folder = cache_root() / "onnx" / fp
            path = folder / ("model-int8.onnx" if quantize else "model.onnx")
            if not path.exists():
                log.info("exporting the transformer to ONNX (%s) in %s", precision, folder)
                try:
                    path = export(first, folder, quantize=quantize)
                except ConfigError:
                    raise
                except Exception as e:  # an architecture the exporter cannot trace
                    shutil.rmtree(folder, ignore_errors=True)
                    raise ConfigError(f"this model could not be exported to ONNX ({type(e).__name__}: {e}).",
                                      fix="use --precision fp32 or int8.") from None
            session = _sessions[memo] = _session(path)
    inner = OrtTransformer(session, first.model.config, names)
    replaced = copy.copy(first)
    replaced._modules = collections.OrderedDict(first._modules)
    replaced._modules["model"] = inner
    out = copy.copy(model)
    out._modules = collections.OrderedDict(model._modules)
    out._modules[key] = replaced
    return out
