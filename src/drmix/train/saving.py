"""What a training run writes: its output directory (refused when it holds a run unless resuming), the
metrics and weights logs, checkpoints with the trainer's state, and the final model, weights and plot.

Every file is written atomically (:mod:`drmix.io`); a log is truncated back to the checkpoint on resume.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.io import atomic_write_json, atomic_write_text, dumps_json
from drmix.outputs import run_finished
from drmix.train.checkpoint import latest_checkpoint
from drmix.train.lock import clean_stale_temporaries
from drmix.train.lora import save_model
from drmix.train.resume_check import check_resume

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    output_dir: Path
    model_dir: Path
    steps: int
    metrics_path: Path
    weights_path: Path | None
    final_loss: float | None = None
    details: dict[str, Any] = field(default_factory=dict)   # what the objective records (COCO: span_stats)


class JsonlLog:
    """Append-only JSONL log (one record per line, flushed); truncated to a checkpoint on resume."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = path
        self.enabled = enabled
        #: called with every appended record (the run's trackers and callbacks listen here)
        self.listeners: list[Any] = []

    def append(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(dumps_json(record) + "\n")  # strict JSON: NaN/inf become null
        for listener in self.listeners:
            listener(record)

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (and a torn last line), atomically."""
        if not self.enabled or not self.path.exists():
            return
        keep = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("step", 0) <= step:
                keep.append(line + "\n")
        atomic_write_text(self.path, "".join(keep))


class RunOutput:
    """The output directory of one training run and its two logs (``metrics.jsonl``, ``weights.jsonl``)."""

    def __init__(self, directory: Path, *, is_main: bool) -> None:
        self.dir = Path(directory)
        self.is_main = is_main
        self.metrics = JsonlLog(self.dir / "metrics.jsonl", is_main)
        self.trajectory = JsonlLog(self.dir / "weights.jsonl", is_main)

    @property
    def finished(self) -> bool:
        """True when the run saved its final model."""
        return run_finished(self.dir)

    def prepare(self, config: TrainConfig, names: list[str], sizes: list[int]) -> Path | None:
        """Refuse a directory holding a run unless resuming (and check the resume); write ``config.yaml``;
        return the checkpoint to resume from, if any."""
        ckpt = latest_checkpoint(self.dir)
        if (ckpt or self.finished) and not config.run.resume:
            raise ConfigError("the output directory already holds a run.", path=self.dir,
                              fix="pass --resume to continue it, or choose another --output-dir.")
        if ckpt is not None:  # every rank checks (and refuses) alike; only the main one logs
            check_resume(self.dir, ckpt, config, allow_changes=config.run.resume_with_changes,
                         log=self.metrics.append, names=names, sizes=sizes)
        if self.is_main:
            self.dir.mkdir(parents=True, exist_ok=True)
            clean_stale_temporaries(self.dir)
            atomic_write_text(self.dir / "config.yaml", config.dump_yaml())
        return ckpt

    def truncate_after(self, step: int) -> None:
        self.metrics.truncate_after(step)
        self.trajectory.truncate_after(step)

    def save_final(self, model: Any, weights: dict) -> None:
        """``model/`` (LoRA merged; with LoRA also ``adapter/``) and ``weights.json`` (main only); ``weights.png``
        is drawn by the report listener (:class:`drmix.report.listener.RunReport`)."""
        if not self.is_main:
            return
        save_model(model, self.dir)
        atomic_write_json(self.dir / "weights.json", weights)

    def result(self, steps: int, last_loss: float | None) -> TrainResult:
        weights = self.dir / "weights.json"
        return TrainResult(self.dir, self.dir / "model", steps, self.metrics.path,
                           weights if weights.exists() else None, last_loss)
