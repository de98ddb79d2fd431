"""Device-time estimates for the benchmarks' ``--preset gpu`` (one GPU lease: 10 minutes a command).

Every GPU preset prints :func:`estimate_line` before it starts, and ``--preset gpu --estimate`` prints only that.
The model of time is deliberately simple and its assumptions are stated where it is printed:

* training runs at ``TRAIN_SAMPLES_PER_S`` examples/s (one example = a query of <= 64 tokens, its positive and
  one hard negative of <= 256 tokens, all-MiniLM-L6-v2, bf16, batch 64). The last H100 measurement of drmix
  was 540 samples/s with on-the-fly tokenisation, which capped it (~500/s of tokenisation on one core;
  docs/benchmarks.md); the compute floor measured on the same H100 is ~3,230 samples/s at batch 128 / 256
  tokens. With pre-tokenised inputs (>= 100 batches/s of 128 on one CPU core, bench_inputs.py) the input cap
  is gone; 1,000 samples/s (about a third of the floor) is assumed. Every estimate is also given at the
  last measured 540 samples/s, the pessimistic bound;
* encoding for evaluation: ``ENCODE_PASSAGES_PER_S`` passages/s at 256 tokens (forward only, bf16);
* fixed costs: ``START_S`` per command (unpacking the environment, importing, building and tokenising the
  collections once), ``RUN_OVERHEAD_S`` per trained model (loading, saving, the first steps' warm-up).

Hand-written: no library estimates a training script's device time.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

TRAIN_SAMPLES_PER_S = 1000.0
LAST_MEASURED_SAMPLES_PER_S = 540.0
ENCODE_PASSAGES_PER_S = 10000.0
START_S = 60.0
RUN_OVERHEAD_S = 4.0
COMMAND_LIMIT_S = 600.0


@dataclass
class Estimate:
    """Work of one command: training examples, passages encoded, models trained, fixed extra seconds
    (``fixed_s``: e.g. compiling, stated by the benchmark that adds it)."""

    samples: float = 0.0
    passages: float = 0.0
    runs: int = 0
    fixed_s: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)

    def train(self, label: str, samples: float, runs: int = 1) -> None:
        self.samples += samples
        self.runs += runs
        self.parts[label] = self.parts.get(label, 0.0) + samples

    def encode(self, passages: float) -> None:
        self.passages += passages

    def seconds(self, samples_per_s: float = TRAIN_SAMPLES_PER_S) -> float:
        return (START_S + self.samples / samples_per_s + self.passages / ENCODE_PASSAGES_PER_S
                + self.runs * RUN_OVERHEAD_S + self.fixed_s)


def estimate_line(est: Estimate, what: str = "") -> str:
    """One line: the estimate at the assumed speed and at the last measured one, and whether it fits."""
    s, slow = est.seconds(), est.seconds(LAST_MEASURED_SAMPLES_PER_S)
    fits = "fits one 10-minute command" if s <= COMMAND_LIMIT_S else "DOES NOT fit one 10-minute command: split it"
    fixed = f", {est.fixed_s:,.0f} s the benchmark adds itself" if est.fixed_s else ""
    return (f"estimated device time{(' of ' + what) if what else ''}: {s / 60:.1f} min on one H100 ({fits}; "
            f"{est.runs} models, {est.samples:,.0f} training examples at {TRAIN_SAMPLES_PER_S:,.0f}/s assumed with "
            f"pre-tokenised inputs, {est.passages:,.0f} passages encoded{fixed}; {slow / 60:.1f} min at the last "
            f"measured {LAST_MEASURED_SAMPLES_PER_S:,.0f} samples/s)")


class Budget:
    """The device time of one command split among its parts: what is left of ``total_s`` since it started, and the
    line a part that does not fit prints instead of running (``clock``: seconds, monotonic)."""

    def __init__(self, total_s: float = COMMAND_LIMIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s, self.clock = float(total_s), clock
        self.start = clock()

    def left(self) -> float:
        return self.total_s - (self.clock() - self.start)

    def fits(self, need_s: float) -> bool:
        return need_s <= self.left()

    def skip_line(self, what: str, need_s: float) -> str:
        return (f"{what}: skipped, it needs about {need_s:.0f} s and {max(0.0, self.left()):.0f} s are left of the "
                f"{self.total_s:.0f} s budget")
