"""LoRA fine-tuning through ``peft``: low-rank adapters on the encoder, saved merged and as an adapter.

Hu et al. (2022), "LoRA: Low-Rank Adaptation of Large Language Models": a frozen weight ``W`` gets a
trainable update ``W + (alpha / r) B A`` with ``A`` (r x d_in, random) and ``B`` (d_out x r, zeros),
so training starts from the pretrained model. The tDRO paper (AAAI 2025, arXiv:2408.10613) fine-tunes its LLM
retrievers this way with ``r=8, alpha=32`` and dropout 0.1: those are the defaults here (``r`` is
required to switch LoRA on).

The adapter wraps the transformer inside the SentenceTransformer (``model[0].model``), so pooling,
normalisation and prompts are untouched and the trainer's loop does not change (only the adapter's
parameters require gradients, so only they reach the optimiser). At the end the run saves
``model/``, a normal SentenceTransformer folder with the adapter merged into the weights (loads with
``SentenceTransformer(path)`` anywhere, no peft needed), and ``adapter/``, the peft adapter alone.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError
from drmix.io.atomic import atomic_dir

log = logging.getLogger(__name__)


def _transformer(model: Any) -> Any:
    try:
        first = model[0]
    except (TypeError, IndexError, KeyError):
        first = None
    if first is None or not hasattr(first, "model"):
        raise ConfigError("LoRA needs a SentenceTransformer whose first module is a Transformer.",
                          fix="use a standard SentenceTransformer model folder, or train without --lora-r.")
    return first


def apply_lora(model: Any, *, r: int, alpha: float = 32.0, dropout: float = 0.1,
               targets: list[str] | None = None) -> Any:
    """Wrap the model's transformer with LoRA adapters (in place); returns the model."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:  # pragma: no cover - peft is a dependency
        raise ConfigError("LoRA needs the peft package.", fix="pip install peft") from None
    module = _transformer(model)
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets) if targets else None,
                        bias="none")
    try:
        module.model = get_peft_model(module.model, config)
    except ValueError as e:
        raise ConfigError(f"cannot add LoRA adapters ({str(e).splitlines()[0][:200]}).",
                          fix="name the layers to adapt with --lora-targets (e.g. query value for BERT, "
                              "q_proj v_proj for decoder LMs).") from None
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log.info("LoRA r=%d alpha=%s: %d of %d parameters trainable", r, alpha, trainable, total)
    return model


def peft_model_of(model: Any) -> Any | None:
    """The peft model inside ``model`` when it carries LoRA adapters, else ``None``."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover
        return None
    try:
        inner = model[0].model
    except (TypeError, IndexError, KeyError, AttributeError):
        return None
    return inner if isinstance(inner, PeftModel) else None


def save_model(model: Any, output_dir: str | Path) -> None:
    """Write ``output_dir/model`` (SentenceTransformer folder, adapters merged) and, with LoRA, ``adapter/``.

    Merging happens in place: afterwards ``model`` is the plain merged SentenceTransformer.
    """
    out = Path(output_dir)
    peft_model = peft_model_of(model)
    if peft_model is not None:
        with atomic_dir(out / "adapter") as tmp:
            peft_model.save_pretrained(str(tmp))
        model[0].model = peft_model.merge_and_unload()
    with atomic_dir(out / "model") as tmp:
        model.save(str(tmp))
