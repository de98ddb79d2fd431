"""Devices, processes and collectives in one place: device checks, host-to-device copies, precision
(autocast dtype) resolution, and the all-reduce every DDP-aware component uses.

Everything here is the identity on one process (no ``torch.distributed`` group), so callers never branch
on the world size themselves. Under ``accelerate launch`` / ``torchrun`` the default process group is the
one ``accelerate`` initialised; NCCL groups reduce CUDA tensors, so host tensors are moved there and back.
"""
from __future__ import annotations

import contextlib
import logging
import platform
import re
from typing import Any, Literal

import numpy as np
import torch

from drmix.errors import ConfigError

log = logging.getLogger(__name__)

# -- devices -----------------------------------------------------------------------------------------------

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|mps|xpu(:\d+)?)$")


def check_device(device: str | None) -> None:
    """Refuse a device that is unknown or absent (``--device cuda`` without a GPU); None = pick automatically."""
    if device is None:
        return
    if not _DEVICE.match(device):
        raise ConfigError(f"unknown device {device!r}.", fix="use cpu, cuda, cuda:N, mps or xpu.")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device}: no CUDA GPU is available here.",
                              fix="use --device cpu, or leave --device out to pick the GPU when there is one.")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible.",
                              fix="pick an index below that, or set CUDA_VISIBLE_DEVICES.")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("--device mps: Apple's GPU backend is not available here.", fix="use --device cpu.")


def model_device(model: Any) -> torch.device:
    """The device a model's parameters live on (CPU when it does not say)."""
    dev = getattr(model, "device", None)
    return torch.device(dev) if dev is not None else torch.device("cpu")


def pin_memory_available(device: torch.device | str) -> bool:
    """Pinned host memory helps (and is allowed) only for copies to a CUDA device."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def to_device(features: dict[str, Any], device: torch.device | str) -> dict[str, Any]:
    """Move the tensors of a feature dict to ``device``; asynchronous when they are pinned (overlaps with
    queued GPU work). Other values pass through unchanged."""
    return {k: (v.to(device, non_blocking=v.is_pinned()) if isinstance(v, torch.Tensor) else v)
            for k, v in features.items()}


# -- precision ---------------------------------------------------------------------------------------------

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_precision(requested: str | None, device: torch.device | str) -> str:
    """``no`` | ``fp16`` | ``bf16`` for ``requested`` (``auto``/``fp32`` included) on ``device``.

    ``auto``: bf16 on a GPU that supports it (Ampere and newer), fp16 on older GPUs, fp32 (``no``) elsewhere
    (CPU autocast to bf16 is slower than fp32 on most CPUs without AMX).
    """
    requested = (requested or "auto").lower()
    if requested in ("no", "fp32"):
        return "no"
    if requested in ("fp16", "bf16"):
        return requested
    if requested != "auto":
        raise ValueError(f"unknown precision {requested!r}: use auto, fp32 (no), fp16 or bf16")
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``flags`` on x86, ``Features`` on Arm); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def cpu_bf16() -> dict[str, bool]:
    """What this CPU has for bf16: ``avx512_bf16`` (x86 bf16 dot products), ``amx`` (x86 AMX bf16 matrix tiles),
    ``arm_bf16`` (Arm's BFMMLA/BFDOT), and ``fast``: whether bf16 autocast can beat fp32 here -- AMX on x86,
    the bf16 instructions on Arm (what oneDNN / Arm Compute Library run bf16 matrix products on). Without them
    (AVX512-BF16 alone included) autocast converts every operand and usually runs slower than fp32.
    From torch's own CPU probe (``torch.cpu._is_amx_tile_supported``) where it has one, else ``/proc/cpuinfo``."""
    flags = cpu_flags()

    def probe(name: str, flag: str) -> bool:
        fn = getattr(torch.cpu, name, None)
        try:
            return bool(fn()) if callable(fn) else flag in flags
        except Exception:  # noqa: BLE001 -- a probe that fails says nothing; the flags decide
            return flag in flags

    amx = probe("_is_amx_tile_supported", "amx_tile") and ("amx_bf16" in flags or not flags)
    avx = probe("_is_avx512_bf16_supported", "avx512_bf16")
    arm = platform.machine().lower() in ("aarch64", "arm64") and "bf16" in flags
    return {"avx512_bf16": avx, "amx": amx, "arm_bf16": arm, "fast": amx or arm}


_warned: set[str] = set()


def slow_bf16_line(name: str, device: torch.device | str, option: str) -> str | None:
    """The line to say when ``name`` (a resolved precision) is bf16 on a CPU without bf16 matrix units, or None."""
    if name != "bf16" or torch.device(device).type != "cpu":
        return None
    bf16 = cpu_bf16()
    if bf16["fast"]:
        return None
    has = "AVX512-BF16 but no AMX" if bf16["avx512_bf16"] else "no AMX, no AVX512-BF16"
    return (f"bf16 on a CPU without bf16 matrix units ({has}): autocast converts every operand and is usually "
            f"slower than fp32 here (several times, for small models); {option} for fp32, or run on a GPU.")


def warn_slow_bf16(name: str, device: torch.device | str, option: str) -> bool:
    """Log :func:`slow_bf16_line` once per process and option; whether it applied."""
    line = slow_bf16_line(name, device, option)
    if line is not None and option not in _warned:
        _warned.add(option)
        log.warning("%s", line)
    return line is not None


def enable_tf32(device: torch.device | str) -> None:
    """Tensor-core TF32 for fp32 matmuls and convolutions on CUDA (a no-op elsewhere)."""
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def inference_autocast(precision: str | None, device: torch.device | str) -> contextlib.AbstractContextManager:
    """Autocast for encoding: ``auto`` is fp16/bf16 on CUDA (as :func:`resolve_precision`), fp32 on CPU."""
    name = resolve_precision(precision, device)
    if name == "no":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=AUTOCAST_DTYPES[name])


# -- processes and collectives -----------------------------------------------------------------------------

def distributed() -> bool:
    """True inside an initialised ``torch.distributed`` process group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def dist_info() -> tuple[int, int]:
    """``(world_size, rank)``; ``(1, 0)`` on a single process."""
    if distributed():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


def all_reduce(value: torch.Tensor | np.ndarray, op: Literal["sum", "mean", "max"] = "sum") -> Any:
    """Sum (average, maximum) of ``value`` over every process; the identity on one process.

    A tensor is reduced in place and returned (on its own device; through the GPU and back when the group
    is NCCL and the tensor lives on the host); a numpy array is returned as a new float64 array.
    """
    if isinstance(value, np.ndarray):
        if not distributed():
            return value
        return all_reduce(torch.as_tensor(value, dtype=torch.float64).clone(), op).numpy()
    if not distributed():
        return value
    world = torch.distributed.get_world_size()
    target = value
    if torch.distributed.get_backend() == "nccl" and value.device.type != "cuda":
        target = value.cuda()
    torch.distributed.all_reduce(target, op=torch.distributed.ReduceOp.MAX if op == "max" else
                                 torch.distributed.ReduceOp.SUM)
    if op == "mean":
        target.div_(world)
    if target is not value:
        value.copy_(target.to(value.device))
    return value


def broadcast(value: torch.Tensor, src: int = 0) -> torch.Tensor:
    """``value`` of process ``src`` on every process (in place); the identity on one process."""
    if distributed():
        torch.distributed.broadcast(value, src=src)
    return value
