"""What every multi-stage recipe does the same way: skip a finished stage, train one, record the run.

A stage writes its own subfolder of the recipe's ``output_dir``; it is finished when its model is saved
(:func:`drmix.outputs.run_finished`), and a rerun of the recipe skips it. An interrupted training stage is
resumed from its last checkpoint (the recipes set ``resume: true`` on every stage's config).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drmix.io import atomic_write_json, atomic_write_text
from drmix.outputs import run_finished

log = logging.getLogger(__name__)


@dataclass
class StageOutput:
    name: str
    output_dir: Path
    model_dir: Path
    skipped: bool


def run_stage(name: str, output_dir: str | Path, run: Callable[[], Any]) -> StageOutput:
    """Call ``run()`` unless the stage in ``output_dir`` finished earlier; the model is ``output_dir/model``."""
    out = Path(output_dir)
    if run_finished(out):
        log.info("%s: finished earlier in %s, skipping", name, out)
        return StageOutput(name, out, out / "model", True)
    log.info("%s: training into %s", name, out)
    run()
    return StageOutput(name, out, out / "model", False)


def train_stage(name: str, config: Any, **train_kwargs: Any) -> StageOutput:
    """One ``drmix train`` run (``config`` a TrainConfig) as a stage; keyword arguments go to ``train``."""
    from drmix.api import train

    return run_stage(name, config.run.output_dir, lambda: train(config, **train_kwargs))


def record_config(root: str | Path, name: str, config: Any) -> Path:
    """Create the recipe's root folder and write the configuration it runs with (``root/name``, YAML)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / name, config.dump_yaml())
    return root / name


def write_summary(root: str | Path, markdown: str, data: dict[str, Any]) -> None:
    """``summary.md`` and ``summary.json`` of a recipe, each written atomically."""
    atomic_write_text(Path(root) / "summary.md", markdown)
    atomic_write_json(Path(root) / "summary.json", data)
