"""Experiment tracking: the trainer's scalars to TensorBoard and/or Weights & Biases, and HF callbacks.

``report_to`` (config field and ``--report-to``, repeatable) names the trackers: ``none`` (the default),
``tensorboard`` (event files under ``OUTPUT_DIR/tensorboard`` through ``torch.utils.tensorboard``'s
``SummaryWriter``, which needs the ``tensorboard`` package) and ``wandb`` (``wandb.init`` in offline mode
unless ``WANDB_MODE`` says otherwise; files under ``OUTPUT_DIR/wandb``; sync later with ``wandb sync``).
Every record the trainer writes to ``metrics.jsonl`` / ``weights.jsonl`` is flattened by
:func:`scalars_of` into tags such as ``train/loss``, ``train/lr``, ``train/samples_per_s``,
``loss/<collection>``, ``weight/<collection>`` and ``eval/<dataset>/<metric>``.

:class:`HFCallbacks` runs ``transformers.TrainerCallback`` objects passed to the trainer from Python
(``on_train_begin``, ``on_step_end``, ``on_log``, ``on_evaluate``, ``on_save``, ``on_train_end``), with a
``TrainingArguments`` / ``TrainerState`` built from the drmix configuration; a callback that sets
``control.should_training_stop`` ends training after that step (the model is saved as usual).
"""
from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError

log = logging.getLogger(__name__)

TRACKERS = ("none", "tensorboard", "wandb")


def scalars_of(record: dict[str, Any]) -> dict[str, float]:
    """Flat ``{tag: value}`` of one metrics / weights record (non-finite and non-numeric values dropped)."""
    out: dict[str, float] = {}

    def put(tag: str, v: Any) -> None:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            out[tag] = float(v)

    for key in ("loss", "raw_loss", "lr", "samples_per_s", "train_seconds", "strategy_seconds", "grad_norm",
                "skipped_steps", "nonfinite_skipped"):
        if key in record:
            put(f"train/{key}", record[key])
    for key, prefix in (("collection_losses", "loss"), ("collection_counts", "examples"), ("weights", "weight"),
                        ("proxy_loss", "proxy_loss"), ("reference_loss", "reference_loss")):
        m = record.get(key)
        if isinstance(m, list):
            m = {str(i): v for i, v in enumerate(m)}
        if isinstance(m, dict):
            for name, v in m.items():
                put(f"{prefix}/{name}", v)
    ev = record.get("eval")
    if isinstance(ev, dict):
        for key, v in ev.items():
            put(f"eval/{key}", v)
    return out


class Tracker(ABC):
    """Receives scalars per step; ``close`` flushes."""

    @abstractmethod
    def log(self, scalars: dict[str, float], step: int) -> None:
        """Record ``scalars`` at optimiser step ``step``."""

    def close(self) -> None:
        pass


class TensorBoardTracker(Tracker):
    """Event files under ``log_dir``. ``purge_step``: the first step a resumed run logs again; TensorBoard
    drops the earlier files' events from that step on (logged after the checkpoint by the killed run), so
    every step shows once and the checkpoint's own step is kept."""

    def __init__(self, log_dir: str | Path, *, purge_step: int | None = None, config: dict | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError("report_to: tensorboard needs the tensorboard package.",
                              fix="pip install tensorboard, or drop tensorboard from --report-to.") from None
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step or None)
        if config is not None and not purge_step:
            import yaml

            self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for tag, v in scalars.items():
            self.writer.add_scalar(tag, v, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class WandbTracker(Tracker):
    """A W&B run in ``dir`` (offline unless ``WANDB_MODE`` is set); resumed runs reuse the stored id."""

    def __init__(self, run_dir: str | Path, *, config: dict | None = None, resume: bool = False) -> None:
        try:
            import wandb
        except ImportError:
            raise ConfigError("report_to: wandb needs the wandb package.",
                              fix="pip install wandb, or drop wandb from --report-to.") from None
        import os

        from drmix.io.atomic import atomic_write_text

        run_dir = Path(run_dir)
        id_file = run_dir / "wandb" / "run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else wandb.util.generate_id()
        (run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        atomic_write_text(id_file, run_id + "\n")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "drmix"), name=run_dir.resolve().name,
                              dir=str(run_dir), id=run_id, resume="allow" if resume else None, config=config,
                              mode=os.environ.get("WANDB_MODE", "offline"))

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


def parse_report_to(values: Iterable[str]) -> list[str]:
    """Validated tracker names (``none`` alone means no tracker; commas also separate names)."""
    names: list[str] = []
    for v in values:
        for name in str(v).split(","):
            name = name.strip().lower()
            if not name:
                continue
            if name not in TRACKERS:
                raise ConfigError(f"unknown report_to value {name!r}.", fix=f"use one or more of {', '.join(TRACKERS)}.")
            if name != "none" and name not in names:
                names.append(name)
    return names


class Tracking:
    """The trackers a run reports to; :meth:`record` takes the trainer's JSONL records as they are written."""

    def __init__(self, trackers: Sequence[Tracker] = ()) -> None:
        self.trackers = list(trackers)

    @classmethod
    def from_config(cls, report_to: Iterable[str], run_dir: str | Path, *, start_step: int = 0,
                    config: dict | None = None) -> "Tracking":
        """The trackers of ``report_to``; ``start_step``: the steps already done (a resumed checkpoint's
        step; 0 for a new run): TensorBoard purges the earlier events from ``start_step + 1`` on."""
        trackers: list[Tracker] = []
        for name in parse_report_to(report_to):
            if name == "tensorboard":
                trackers.append(TensorBoardTracker(Path(run_dir) / "tensorboard",
                                                   purge_step=start_step + 1 if start_step > 0 else None,
                                                   config=config))
            elif name == "wandb":
                trackers.append(WandbTracker(run_dir, config=config, resume=start_step > 0))
        return cls(trackers)

    def record(self, record: dict[str, Any], step: int | None = None) -> None:
        if not self.trackers:
            return
        scalars = scalars_of(record)
        step = int(record.get("step", 0) if step is None else step)
        if scalars:
            for t in self.trackers:
                t.log(scalars, step)

    def close(self) -> None:
        for t in self.trackers:
            try:
                t.close()
            except Exception as e:  # noqa: BLE001 - a tracker failing to flush never fails the run
                log.warning("closing %s failed: %s", type(t).__name__, e)
        self.trackers = []


def _warmup_steps(config: Any) -> int:
    from drmix.train.optim import warmup_steps

    return warmup_steps(config)


class HFCallbacks:
    """Drives ``transformers.TrainerCallback`` objects from the drmix training loop."""

    def __init__(self, callbacks: Sequence[Any], config: Any) -> None:
        from transformers import TrainerControl, TrainerState, TrainingArguments

        self.callbacks = list(callbacks)
        self.args = TrainingArguments(
            output_dir=str(config.run.output_dir), max_steps=config.optim.max_steps, learning_rate=config.optim.learning_rate,
            per_device_train_batch_size=config.contrastive.batch_size, weight_decay=config.optim.weight_decay,
            warmup_steps=_warmup_steps(config), seed=config.optim.seed,
            gradient_accumulation_steps=config.contrastive.gradient_accumulation_steps, logging_steps=config.run.log_every,
            save_steps=config.run.save_every, max_grad_norm=config.optim.max_grad_norm, report_to="none",
            use_cpu=config.run.device == "cpu")
        self.state = TrainerState(max_steps=config.optim.max_steps, logging_steps=config.run.log_every,
                                  save_steps=config.run.save_every, is_world_process_zero=True)
        self.control = TrainerControl()

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def _call(self, event: str, **kwargs: Any) -> None:
        for cb in self.callbacks:
            result = getattr(cb, event)(self.args, self.state, self.control, **kwargs)
            if result is not None:
                self.control = result

    def sync_steps(self, config: Any) -> None:
        """The step counts the run settled on (``--epochs`` derives ``max_steps`` once the data is loaded)."""
        self.state.max_steps = self.args.max_steps = config.optim.max_steps
        self.args.warmup_steps = _warmup_steps(config)

    def train_begin(self, step: int, model: Any) -> None:
        self.state.global_step = step
        self._call("on_train_begin", model=model)

    def step_end(self, step: int, model: Any) -> bool:
        """Run ``on_step_end``; True when a callback asked to stop training."""
        self.state.global_step = step
        self._call("on_step_end", model=model)
        return bool(self.control.should_training_stop)

    def logged(self, record: dict[str, Any]) -> None:
        if "step" in record:
            self.state.global_step = int(record["step"])
        logs = scalars_of(record)
        self.state.log_history.append({**logs, "step": self.state.global_step})
        if "eval" in record:
            self._call("on_evaluate", metrics={f"eval_{k[5:]}": v for k, v in logs.items() if k.startswith("eval/")})
        else:
            self._call("on_log", logs=logs)

    def saved(self) -> None:
        self._call("on_save")

    def train_end(self, model: Any) -> None:
        self._call("on_train_end", model=model)


def split_callbacks(callbacks: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """``(plain callables, transformers TrainerCallbacks)``."""
    try:
        from transformers import TrainerCallback
    except ImportError:  # pragma: no cover - transformers is a dependency
        return list(callbacks), []
    hf = [c for c in callbacks if isinstance(c, TrainerCallback)]
    return [c for c in callbacks if not isinstance(c, TrainerCallback)], hf
