"""``drmix train``: fine-tune a model on a mixture of collections (every config field is a flag)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.options import config_command, load_checked
from drmix.cli.report import after_run, before_run
from drmix.cli.train_flags import PanelCommand, alias_params, apply_aliases, check_argv
from drmix.config import TrainConfig, load_config
from drmix.outputs import claim_run

log = logging.getLogger(__name__)

TRAIN_HELP = """Fine-tune an embedding model with InfoNCE on a mixture of training collections.

CONFIG is an optional YAML file with any of the fields below; flags override it. Data (--data, repeatable)
is a collection file (JSONL, JSON, parquet, CSV/TSV, Arrow) in drmix's, sentence-transformers', Tevatron's or
FlagEmbedding's layout (detected; --format, --columns), a folder of them, a saved dataset (NAME:split), a Hub
dataset id, a BEIR directory (train qrels) or a YAML list of collections (docs/data.md).
The output directory receives model/ (a SentenceTransformer folder), config.yaml, metrics.jsonl,
weights.json and checkpoints/ (SentenceTransformer(OUTPUT_DIR) loads model/); --resume continues a killed run,
--resume CHECKPOINT (or --resume-from CHECKPOINT) an earlier point. transformers' and Tevatron's names are read too: --epochs, --bf16,
--per-device-batch-size, --train-group-size, --deepspeed (docs/integrations.md). Multi-GPU: accelerate launch -m
drmix.cli train ...
"""


def run_train(config_path: Path | None, overrides: dict[str, Any], **aliases: Any) -> None:
    overrides = apply_aliases(overrides, aliases)
    check_argv(load_config(TrainConfig, config_path, overrides))  # no --data, a mistyped path: before torch loads
    config = load_checked(TrainConfig, config_path, overrides)    # the strategy's options: its module loads torch
    claim_run(config)                   # the output contract (drmix.outputs), before anything loads
    before_run(config)
    from drmix.api import train

    try:
        result = train(config)
    except KeyboardInterrupt:
        raise typer.Exit(_interrupted(Path(config.run.output_dir))) from None
    from drmix.retrieval.ranks import main_process

    if not main_process():  # under a launcher: global rank 0 prints the outcome and pushes (--push-to-hub)
        return
    from drmix.cli import console
    from drmix.cli.report import print_outcome

    console.print(f"[green]trained[/green] {result.steps} steps; model: {result.model_dir}")
    console.print(f"config: {result.output_dir / 'config.yaml'}  metrics: {result.metrics_path}"
                  + (f"  weights: {result.weights_path}" if result.weights_path else ""))
    after_run(result.output_dir, config)
    print_outcome(result.output_dir, data=config.eval.eval_data)


def _interrupted(out: Path) -> int:
    """Say where an interrupted (Ctrl-C, SIGTERM) run can be resumed from; the exit code (130, 143)."""
    from drmix.cli import err_console, interrupt_exit_code, interrupt_name
    from drmix.train.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(out)
    where = (f"the last checkpoint is {ckpt}; run the same command with --resume to continue from it"
             if ckpt is not None else "no checkpoint was written yet; run the same command again to start over")
    err_console.print(f"{interrupt_name()}: {where} (--output-dir {out}).", highlight=False, soft_wrap=True)
    return interrupt_exit_code()


def register(app: typer.Typer) -> None:
    app.command("train", help=TRAIN_HELP, no_args_is_help=True, cls=PanelCommand)(
        config_command(TrainConfig, run_train, trailing=alias_params()))


register_area(CommandArea("train", register))
