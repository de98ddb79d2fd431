"""What ``drmix report`` reads of a run made by sentence-transformers' (transformers') trainer, e.g. with
:mod:`drmix.integrations.sentence_transformers`: its ``weights.jsonl`` / ``weights.json`` (written by
``MixtureDRO``) and the ``log_history`` of its newest ``trainer_state.json`` (``OUTPUT/trainer_state.json``
after ``trainer.save_state()``, else the highest ``OUTPUT/checkpoint-N/trainer_state.json``), turned into
records of drmix's ``metrics.jsonl`` layout: ``{"step", "loss", "lr"}`` for training logs and
``{"step", "eval": {metric: value}}`` for evaluations (an evaluator's ``eval_<name>`` keys, prefix dropped)."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: eval_* keys of transformers' own bookkeeping, not scores
_NOT_SCORES = {"loss", "runtime", "samples_per_second", "steps_per_second"}


def trainer_state_file(folder: Path) -> Path | None:
    """The newest ``trainer_state.json`` of a trainer's output folder, or None."""
    if _CHECKPOINT.match(folder.name):
        return None  # a checkpoint is part of a run, not a run
    if (folder / STATE_FILE).is_file():
        return folder / STATE_FILE
    steps = []
    try:
        for child in folder.iterdir():
            m = _CHECKPOINT.match(child.name)
            if m and (child / STATE_FILE).is_file():
                steps.append((int(m.group(1)), child / STATE_FILE))
    except OSError:
        return None
    return max(steps)[1] if steps else None


def is_trainer_run(folder: Path) -> bool:
    """A sentence-transformers / transformers trainer's output folder (``MixtureDRO``'s ``weights.jsonl`` or a
    ``trainer_state.json``), which drmix's report can draw."""
    return not _CHECKPOINT.match(folder.name) and ((folder / "weights.jsonl").is_file()
                                                   or trainer_state_file(folder) is not None)


def trainer_records(folder: Path) -> list[dict[str, Any]]:
    """The trainer's ``log_history`` as drmix metric records (empty when there is none or it cannot be read)."""
    path = trainer_state_file(folder)
    if path is None:
        return []
    try:
        history = json.loads(path.read_text(encoding="utf-8")).get("log_history", [])
    except (OSError, ValueError, AttributeError) as e:
        log.warning("cannot read %s (%s); its curves are left out", path, e)
        return []
    out: list[dict[str, Any]] = []
    for entry in history if isinstance(history, list) else []:
        if not isinstance(entry, dict) or "step" not in entry:
            continue
        if "loss" in entry:
            out.append({"step": entry["step"], "loss": entry["loss"], "lr": entry.get("learning_rate")})
        scores = {k[len("eval_"):]: v for k, v in entry.items()
                  if k.startswith("eval_") and k[len("eval_"):] not in _NOT_SCORES}
        if scores:
            out.append({"step": entry["step"], "eval": scores})
    return out
