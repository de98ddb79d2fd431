"""Resuming refuses silent changes to how a run trains.

A checkpoint records the configuration it was trained with (``trainer_state.json``'s ``config``; older
checkpoints: the run's ``config.yaml``). ``--resume`` compares it with the configuration given now; a
difference in any field that shapes training (seed, learning rate, batch size, temperature, data,
mixture, strategy options, ...) is refused with a :class:`ResumeMismatchError` that lists the fields,
unless ``--resume-with-changes`` is set: then the change is written to ``metrics.jsonl`` as a record
``{"step": N, "event": "resume_with_changes", "changes": {field: {"before": ..., "after": ...}}}`` and the
run continues. Fields whose role is ``operational`` (bookkeeping: output, logging, checkpoints, evaluation,
device; :mod:`drmix.config.parts`) may change freely. Recorded configs of either layout (grouped, or drmix 0.1's
flat one) are compared field by field under their flat names.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from drmix.config import OPERATIONAL, Config, TrainConfig
from drmix.errors import ConfigError

class ResumeMismatchError(ConfigError):
    """``--resume`` with training fields that differ from the checkpoint's."""


def recorded_config(run_dir: Path, trainer_state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The configuration the checkpoint was trained with, or None when none was recorded."""
    if trainer_state and isinstance(trainer_state.get("config"), dict):
        return trainer_state["config"]
    path = Path(run_dir) / "config.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return raw if isinstance(raw, dict) else None


def training_changes(before: dict[str, Any], after: dict[str, Any],
                     config_cls: type[Config] = TrainConfig) -> dict[str, dict[str, Any]]:
    """``{field: {"before", "after"}}`` for every training field whose value differs (flat names; values in
    either layout)."""
    before, after = config_cls.flatten(before), config_cls.flatten(after)
    roles = config_cls.roles()
    changes = {}
    for key in sorted(set(before) | set(after)):
        if roles.get(key) == OPERATIONAL:
            continue
        if key not in before:  # a field added to drmix since the checkpoint: its default is what ran
            continue
        b, a = before.get(key), after.get(key)
        if key == "model" and b is None and a is not None:  # runs before the resolved path was recorded
            from drmix.model.encoder import resolve_model_path

            b = resolve_model_path(None)
        if json.dumps(b, sort_keys=True, default=str) != json.dumps(a, sort_keys=True, default=str):
            changes[key] = {"before": b, "after": a}
    return changes


def check_data(checkpoint: Path, state: dict[str, Any] | None, names: list[str] | None,
               sizes: list[int] | None) -> None:
    """Refuse a resume whose collections changed size (the sampler's cursors would point elsewhere)."""
    if not state or names is None or sizes is None or state.get("collections") != names:
        return  # a different set of collections is reported when the checkpoint is restored
    before = state.get("sizes")
    if isinstance(before, list) and before != sizes:
        diff = ", ".join(f"{n} {b} -> {a}" for n, b, a in zip(names, before, sizes) if b != a)
        raise ResumeMismatchError(f"the training collections changed size since the checkpoint: {diff}.",
                                  path=checkpoint, fix="resume with the original data files, or start a new "
                                  "--output-dir.")


def check_resume(run_dir: Path, checkpoint: Path, current: Config, *, allow_changes: bool,
                 log: Callable[[dict[str, Any]], None], names: list[str] | None = None,
                 sizes: list[int] | None = None) -> dict[str, dict[str, Any]]:
    """Refuse (or, with ``allow_changes``, log) a resume whose training fields differ; return the changes.

    Also refuses collections whose sizes changed (never allowed: the data order cannot be resumed).
    """
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = None
    check_data(checkpoint, state, names, sizes)
    before = recorded_config(run_dir, state)
    if before is None:
        return {}
    changes = training_changes(before, current.model_dump(mode="json"), type(current))
    if not changes:
        return {}
    listed = ", ".join(f"{k} {v['before']!r} -> {v['after']!r}" for k, v in changes.items())
    if not allow_changes:
        raise ResumeMismatchError(f"the checkpoint was trained with different settings: {listed}.",
                                  path=checkpoint, fix="resume with the original settings, pass "
                                  "--resume-with-changes to continue with the new ones (logged in metrics.jsonl), "
                                  "or start a new --output-dir.")
    log({"step": int(state.get("step", 0)) if state else 0, "event": "resume_with_changes", "changes": changes})
    return changes
