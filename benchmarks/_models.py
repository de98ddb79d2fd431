"""Starting models for the benchmarks' reduced-compute presets.

``--preset medium`` (bench_mixture, bench_coco) fine-tunes all-MiniLM-L6-v2 cut to its first N transformer
layers: the bundled weights, layers N..5 dropped (embeddings, the first N layers, mean pooling and the
normalisation kept). On CPU a 1-layer model trains several times faster than the 6-layer one at the same
lengths (the per-step work is dominated by the transformer layers), which is what lets 300 optimiser steps at
batch 32 x 3 seeds x every arm fit an hour of two idle cores.
It starts weaker than the full model and moves more when fine-tuned; the presets say so where they report.
"""
from __future__ import annotations

from pathlib import Path


def truncated_minilm(layers: int | None, out: Path) -> str | None:
    """Path of all-MiniLM-L6-v2 cut to ``layers`` layers, written once under ``out`` (None: the full model)."""
    if not layers:
        return None
    from drmix.io.atomic import atomic_write_text
    from drmix.model.encoder import load_encoder

    path = out / f"all-MiniLM-L{layers}-of-L6"
    if (path / "done").exists():
        return str(path)
    model = load_encoder(None)
    enc = model[0].auto_model
    if layers > len(enc.encoder.layer):
        raise SystemExit(f"--model-layers {layers}: the model has only {len(enc.encoder.layer)} layers")
    enc.encoder.layer = enc.encoder.layer[:layers]
    enc.config.num_hidden_layers = layers
    model.save(str(path))
    atomic_write_text(path / "done", f"all-MiniLM-L6-v2, first {layers} layers\n")
    return str(path)
