"""What a training run writes: its output directory (refused when it holds a run unless resuming), the
metrics and weights logs, checkpoints with the trainer's state, and the final model, weights and plot.

Every file is written atomically (:mod:`drmix.io`); a log is truncated back to the checkpoint on resume.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.io.atomic import atomic_write_json, atomic_write_text, dumps_json
from drmix.outputs import run_finished
from drmix.train.checkpoint import checkpoints, latest_checkpoint
from drmix.lock import clean_stale_temporaries
from drmix.train.lora import save_model
from drmix.train.resume_check import check_resume

log = logging.getLogger(__name__)


def steps_for_epochs(epochs: float, examples: int, batch_size: int, accumulation: int = 1) -> int:
    """Optimiser steps of ``epochs`` passes over ``examples`` rows: ``ceil(epochs x examples / (batch_size x
    accumulation))``, at least 1 (transformers' Trainer counts epochs the same way)."""
    return max(1, math.ceil(epochs * examples / (batch_size * accumulation)))


def root_modules(model_dir: Path) -> list[dict[str, Any]]:
    """``model_dir``'s ``modules.json`` with every module path prefixed by the folder's name, for the run root
    (so ``SentenceTransformer(RUN)`` loads ``RUN/model``)."""
    entries = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    return [{**e, "path": "/".join(x for x in (model_dir.name, e.get("path", "")) if x)} for e in entries]


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
        return the checkpoint to resume from, if any (``resume_from``, else the latest)."""
        ckpt = self.chosen_checkpoint(config.run.resume_from) if config.run.resume_from else latest_checkpoint(self.dir)
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

    def chosen_checkpoint(self, path: str) -> Path:
        """The checkpoint folder ``--resume-from`` names (refused, with the run's checkpoints listed, when it is
        not one)."""
        p = Path(path).expanduser()
        if (p / "trainer_state.json").is_file() and (p / "optimizer.pt").is_file():
            return p
        found = [str(c) for c in checkpoints(self.dir)]
        what = ("is not a drmix checkpoint folder (no trainer_state.json and optimizer.pt)." if p.exists() else
                "does not exist.")
        raise ConfigError(what, path=p,
                          fix=(f"pass one of {', '.join(found)}" if found else
                               f"{self.dir} has no checkpoint; drop --resume-from") + ", or --resume for the latest.")

    def finished_step(self, *, resumed_at: int, explicit: bool = False) -> int | None:
        """The step the saved final model was made at (the last step in ``metrics.jsonl``), when the run is
        finished and was not resumed from a chosen earlier checkpoint (``explicit``); else None."""
        if explicit or not self.finished:
            return None
        last = resumed_at
        if self.metrics.path.is_file():
            for line in self.metrics.path.read_text(encoding="utf-8").splitlines():
                try:
                    step = json.loads(line).get("step")
                except (json.JSONDecodeError, AttributeError):
                    continue
                last = max(last, step) if isinstance(step, int) else last
        return last

    def hf_state(self, step: int, config: TrainConfig, examples: int) -> dict[str, Any]:
        """What transformers' ``trainer_state.json`` holds, for tools that read it: ``global_step``, ``epoch``,
        ``max_steps``, ``num_train_epochs``, the batch size and steps of logging and saving, and ``log_history``
        (the training and evaluation records of ``metrics.jsonl`` up to ``step``, keys as transformers names
        them)."""
        per_step = config.contrastive.batch_size * config.contrastive.gradient_accumulation_steps

        def epoch(s: int) -> float:
            return round(s * per_step / max(examples, 1), 4)

        history = []
        if self.metrics.path.is_file():
            for line in self.metrics.path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                s = rec.get("step") if isinstance(rec, dict) else None
                if not isinstance(s, int) or s > step:
                    continue
                if isinstance(rec.get("eval"), dict):
                    from drmix.train.tracking import scalars_of

                    evals = {"eval_" + k.removeprefix("eval/").replace("/", "_"): v
                             for k, v in scalars_of(rec).items() if k.startswith("eval/")}
                    history.append({"epoch": epoch(s), **evals, "step": s})
                elif "loss" in rec:
                    entry = {"epoch": epoch(s), "grad_norm": rec.get("grad_norm"), "learning_rate": rec.get("lr"),
                             "loss": rec["loss"], "step": s}
                    history.append({k: v for k, v in entry.items() if v is not None})
        return {"global_step": step, "epoch": epoch(step), "max_steps": config.optim.max_steps,
                "num_train_epochs": config.optim.epochs if config.optim.epochs is not None
                else math.ceil(epoch(config.optim.max_steps)),
                "logging_steps": config.run.log_every, "save_steps": config.run.save_every,
                "train_batch_size": config.contrastive.batch_size, "log_history": history}

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
        self.write_root_modules()

    def write_root_modules(self) -> None:
        """``modules.json`` (and the model's ``config_sentence_transformers.json``: prompts, similarity) at the run
        root, pointing into ``model/``: ``SentenceTransformer(RUN)`` loads the same model as
        ``SentenceTransformer(RUN/model)``."""
        model_dir = self.dir / "model"
        st_config = model_dir / "config_sentence_transformers.json"
        if st_config.is_file():
            atomic_write_text(self.dir / st_config.name, st_config.read_text(encoding="utf-8"))
        atomic_write_json(self.dir / "modules.json", root_modules(model_dir))

    def result(self, steps: int, last_loss: float | None) -> TrainResult:
        weights = self.dir / "weights.json"
        return TrainResult(self.dir, self.dir / "model", steps, self.metrics.path,
                           weights if weights.exists() else None, last_loss)
