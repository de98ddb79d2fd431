"""Sharded training through accelerate: FSDP and DeepSpeed ZeRO-2/3 given to ``accelerate launch``.

The tDRO paper (seeds/000, Settings) fine-tunes 7-8B decoders with "full-shard data parallel (FSDP), activation
checkpointing and LoRA". drmix never picks a strategy itself: ``accelerate launch --config_file X.yaml -m
drmix.cli train ...`` (ready files in ``examples/accelerate/``; docs/llm.md) makes the trainer's ``Accelerator``
shard the model, and this module holds the three places where sharded training differs from DDP:

* **backward** goes through ``accelerator.backward`` (DeepSpeed's engine must run its own backward, with its
  loss scaling and ZeRO reduce-scatter); drmix's fp16 loss scaler, when on, scales first.
* **clipping** goes through ``accelerator.clip_grad_norm_`` (FSDP clips the sharded gradients with a global norm;
  DeepSpeed clips inside its step, from its config's ``gradient_clipping``).
* **saving**: under FSDP/ZeRO-3 no process holds the whole model, so the final folder is written from
  ``accelerator.get_state_dict`` (a collective that gathers the full state dict to the main process). The main
  process rebuilds the retriever exactly as training built it (same backbone options, same LoRA), loads the
  gathered weights into it (strictly: every key must match) and saves it as usual -- LoRA merged, a plain
  sentence-transformers folder. Intermediate checkpoints are not written under sharding (their optimiser
  state is sharded too); a sharded run therefore cannot ``--resume`` and says so.

Hand-written glue only: the sharding itself is accelerate's / torch's / DeepSpeed's.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)


def sharding_kind(accelerator: Any) -> str | None:
    """``"fsdp"``, ``"deepspeed"`` or ``None`` (one process, DDP, CPU)."""
    from accelerate.utils import DistributedType

    kind = getattr(accelerator, "distributed_type", None)
    if kind == DistributedType.FSDP:
        return "fsdp"
    if kind == DistributedType.DEEPSPEED:
        return "deepspeed"
    return None


def backward(accelerator: Any, loss: torch.Tensor, precision: Any) -> None:
    """``accelerator.backward`` of ``loss`` (scaled first by drmix's fp16 loss scaler when it is on)."""
    accelerator.backward(precision.scale(loss))


def full_state_dict(accelerator: Any, wrapped: Any, prefix: str = "model.") -> dict[str, torch.Tensor] | None:
    """The whole model's state dict, gathered to the main process (``None`` on the others).

    A collective: every process must call it. ``prefix`` is the wrapper's attribute holding the encoder
    (the trainer's dual encoder keeps it in ``.model``)."""
    state = accelerator.get_state_dict(wrapped, unwrap=True)
    if not accelerator.is_main_process:
        return None
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def rebuild_with_state(build: Any, state: dict[str, torch.Tensor]) -> Any:
    """A fresh model from ``build()`` (on CPU) holding ``state``; every key must match."""
    model = build()
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        from drmix.errors import ModelError

        raise ModelError(f"the gathered weights do not match the model (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]}).", fix="report this with the accelerate config used.")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
    return model
