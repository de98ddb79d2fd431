"""Opt-in ``torch.compile`` of an encoder's backbone (``--compile``; off by default).

Each sentence-transformers ``Transformer`` module (the one holding the backbone, ``auto_model``) is compiled
*in place* with :meth:`torch.nn.Module.compile` -- the module rather than ``auto_model`` itself, because
sentence-transformers calls the backbone's ``forward`` method directly, which bypasses a module's compiled
call. The module keeps its class and its parameters, so ``state_dict()`` keys, checkpoints and the saved model
folder are exactly those of the eager model (no ``_orig_mod.`` prefix, which :func:`torch.compile`'s wrapper
would add) and resuming is unchanged. The small pooling/normalisation modules stay eager. Shapes change from
batch to batch (padding to the longest member), so the graph is compiled with dynamic sizes from the start
(``dynamic=True``): one compilation serves every batch shape, and a resumed run runs the same kernels as the
uninterrupted one did at the same step (with ``dynamic=None`` torch would compile a static graph for whichever
shape comes first, so a run resumed mid-way could run other kernels than the run it continues, and round
differently).

Exactness: inductor lowers some accumulations (the embedding's backward, an ``index_put`` with
``accumulate``) to parallel kernels with atomic adds, whose float rounding depends on thread timing -- two
uninterrupted compiled runs then differ from step 2 on (docs/benchmarks.md), and a killed run cannot resume
exactly. It keeps aten's deterministic kernels for them only when ``torch.are_deterministic_algorithms_enabled()`` at
compile time, and compiled graphs are guarded on that flag; so :func:`compile_model` turns on
``torch.use_deterministic_algorithms(True, warn_only=True)`` for the process (an op without a deterministic
kernel warns instead of failing) and sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless it is set (cuBLAS's
deterministic mode; effective when set before CUDA's first matmul). With it, a killed inductor run resumes
bit-exactly (tests/train/test_compile.py, slow test).

Backends: ``inductor`` (the default: generated C++/Triton kernels; needs a C/C++ compiler on CPU) and any
other backend :func:`torch.compile` accepts (``aot_eager`` traces forward and backward but runs them with
eager kernels: no toolchain needed, used by tests/train/test_compile.py). Inductor draws dropout masks with
its own random generator, so a compiled run with dropout is a different random draw from an eager one; with
dropout off the two agree to float rounding (all-MiniLM-L6-v2 on CPU: embeddings 1.4e-7, gradients 4e-8).
Measured in docs/benchmarks.md ("Attention and ``torch.compile``"; benchmarks/bench_compile.py).

Hand-written: only the choice of what to compile; compiling is torch's.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

from drmix.errors import ConfigError

log = logging.getLogger(__name__)


def compile_targets(model: Any) -> list[torch.nn.Module]:
    """The modules ``compile_model`` compiles: each child holding an ``auto_model``, else the whole model."""
    found = [m for m in getattr(model, "children", lambda: [])()
             if isinstance(getattr(m, "auto_model", None), torch.nn.Module)]
    return found or [model]


def compile_model(model: Any, backend: str = "inductor") -> Any:
    """Compile ``model``'s backbone in place with ``torch.compile(backend=backend)``; returns ``model``."""
    import torch._dynamo

    if backend not in torch._dynamo.list_backends(exclude_tags=()):
        raise ConfigError(f"unknown torch.compile backend {backend!r}.",
                          fix="use inductor (default), aot_eager or another of torch._dynamo.list_backends().")
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)  # see the module docstring: exact resume
    for module in compile_targets(model):
        module.compile(backend=backend, dynamic=True)
    log.info("torch.compile(backend=%s) of the encoder's backbone: the first steps compile (slow), "
             "evaluation (no gradients) compiles once more", backend)
    return model
