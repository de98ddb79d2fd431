"""How long encoding a corpus takes: the arithmetic behind ``drmix index --estimate`` (and other estimates).

The time is passages divided by throughput, per GPU, times the GPUs' count, plus a fixed start (model load,
reading the corpus) -- a bound, not a measurement: real throughput depends on passage length, model size and
precision. The assumed rate is stated with every estimate, and a measured one can be given instead
(``--passages-per-s``; measure it with ``benchmarks/bench_encode.py --preset gpu``).

Assumptions (see docs/benchmarks.md, "Plans"):

* ``GPU_PASSAGES_PER_S`` = 900: ``encode_texts`` with all-MiniLM-L6-v2 class models on one H200 at 256 tokens
  per passage, bf16, before the tokenisation pipeline was overlapped with encoding;
* ``CPU_PASSAGES_PER_S`` = 23: all-MiniLM-L6-v2 on two CPU threads, fp32, batch 64, max length 256
  (docs/benchmarks.md, "Corpus encoding: encode_texts vs SentenceTransformer.encode");
* ranks scale linearly: each encodes its own share (about 1/N of the rows) and no data moves between them until the merge,
  whose cost (reading the shards back) is ``MERGE_GB_PER_S`` of float32 vectors.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GPU_PASSAGES_PER_S = 900.0
CPU_PASSAGES_PER_S = 23.0
START_S = 60.0  # load the model and read the corpus, per run
MERGE_GB_PER_S = 1.0


@dataclass(frozen=True)
class EncodePlan:
    """Hours to encode ``passages`` on ``devices`` devices at ``rate`` passages/s each."""

    passages: int
    devices: int
    rate: float
    dim: int = 0

    @property
    def seconds(self) -> float:
        per_rank = -(-self.passages // max(1, self.devices))
        merge = self.passages * self.dim * 4 / 1e9 / MERGE_GB_PER_S if self.devices > 1 else 0.0
        return START_S + per_rank / self.rate + merge

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0


def encode_seconds(passages: int, *, devices: int = 1, rate: float = GPU_PASSAGES_PER_S, dim: int = 0) -> float:
    """Seconds to encode ``passages`` on ``devices`` devices at ``rate`` passages/s each (start and merge
    included); the helper other estimates share."""
    return EncodePlan(passages, devices, rate, dim).seconds


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def estimate_lines(passages: int, *, gpus: Sequence[int] = (1, 8), rate: float | None = None, dim: int = 0,
                   device: str = "gpu", source: str | None = None) -> list[str]:
    """The lines ``drmix index --estimate`` prints: the rate and where it comes from (``source``: measured, say;
    default: assumed, or given with --passages-per-s), then one line per device count."""
    assumed = rate is None
    rate = rate if rate is not None else (GPU_PASSAGES_PER_S if device == "gpu" else CPU_PASSAGES_PER_S)
    unit = "GPU" if device == "gpu" else "CPU process"
    source = source or ("assumed: drmix encode_texts on one H200, 256-token passages, bf16 (docs/benchmarks.md); "
                        "pass --passages-per-s with your own measured rate" if assumed and device == "gpu" else
                        "assumed: all-MiniLM-L6-v2 on two CPU threads, fp32 (docs/benchmarks.md)" if assumed
                        else "given with --passages-per-s")
    shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.3g}"
    lines = [f"{passages:,} passages at {shown} passages/s per {unit} ({source}), plus {START_S:.0f} s to start"
             + (f" and the merge of {passages * dim * 4 / 1e9:.1f} GB of vectors" if dim else "") + ":"]
    for n in gpus:
        plan = EncodePlan(passages, n, rate, dim)
        lines.append(f"  {n} {unit}{'s' if n != 1 else ''}: {_duration(plan.seconds)} ({plan.hours:.2f} h)")
    return lines
